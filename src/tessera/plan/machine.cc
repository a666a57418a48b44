#include "tessera/plan/machine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::plan {
namespace {

using nlohmann::json;

constexpr const char* kKernelNames[kKernelKinds] = {"gemm_forward",
                                                    "gemm_input_grad",
                                                    "gemm_weight_grad",
                                                    "attention_forward",
                                                    "attention_backward",
                                                    "norm_forward",
                                                    "norm_backward",
                                                    "activation_forward",
                                                    "activation_backward",
                                                    "add",
                                                    "dropout",
                                                    "rope",
                                                    "embedding",
                                                    "cross_entropy",
                                                    "optimizer",
                                                    "grad_norm",
                                                    "zero_fill",
                                                    "page_refault",
                                                    "attention_dropout"};
constexpr const char* kCollectiveNames[kCollectiveKinds] = {"all_reduce", "reduce_scatter",
                                                            "all_gather", "send_recv"};
constexpr DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Reads one JSON object key by key, so that every key is either consumed or reported unknown.
class Reader {
 public:
  Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) fail(where_, "expected a JSON object");
  }
  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw Error(where + ": " + what);
  }
  std::string at(const std::string& key) const { return where_ + "." + key; }
  bool has(const std::string& key) const { return object_.contains(key); }
  const json& get(const std::string& key) {
    if (!object_.contains(key)) fail(where_, "missing key \"" + key + "\"");
    used_.insert(key);
    return object_.at(key);
  }
  std::string text(const std::string& key) {
    const json& v = get(key);
    if (!v.is_string()) fail(at(key), "expected a string");
    return v.get<std::string>();
  }
  double positive(const std::string& key) {
    const json& v = get(key);
    if (!v.is_number() || !(v.get<double>() > 0)) fail(at(key), "expected a number > 0");
    return v.get<double>();
  }
  int count(const std::string& key) {
    const json& v = get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1'000'000)
      fail(at(key), "expected a whole number >= 1");
    return static_cast<int>(v.get<int64_t>());
  }
  // Every key of the object was read; else the first unknown one is an error.
  void done(const std::string& expected) const {
    for (auto it = object_.begin(); it != object_.end(); ++it)
      if (!used_.count(it.key())) fail(at(it.key()), "unknown key (expected " + expected + ")");
  }

 private:
  const json& object_;
  std::string where_;
  std::set<std::string> used_;
};

std::string joined(const char* const* names, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::string(names[i]);
  return s;
}

RateCurve read_curve(const json& v, const std::string& where) {
  if (!v.is_array() || v.empty()) Reader::fail(where, "expected a list of [size, rate] pairs");
  RateCurve c;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string here = where + "[" + std::to_string(i) + "]";
    const json& p = v[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() ||
        !(p[0].get<double>() > 0) || !(p[1].get<double>() > 0))
      Reader::fail(here, "expected [size > 0, rate > 0]");
    if (!c.points.empty() && !(p[0].get<double>() > c.points.back().first))
      Reader::fail(here, "sizes must increase");
    c.points.emplace_back(p[0].get<double>(), p[1].get<double>());
  }
  return c;
}

Links read_links(const json& v, const std::string& where) {
  Reader r(v, where);
  Links links;
  if (r.has("overlap")) {
    const json& o = r.get("overlap");
    if (!o.is_number() || o.get<double>() < 0 || o.get<double>() > 1)
      Reader::fail(r.at("overlap"), "expected a fraction in [0, 1]");
    links.overlap = o.get<double>();
  }
  for (int k = 0; k < kCollectiveKinds; ++k) {
    if (!r.has(kCollectiveNames[k])) continue;
    Reader c(r.get(kCollectiveNames[k]), r.at(kCollectiveNames[k]));
    const json& lat = c.get("latency_s");
    if (!lat.is_number() || lat.get<double>() < 0)
      Reader::fail(c.at("latency_s"), "expected a number >= 0");
    links[k].latency_s = lat.get<double>();
    links[k].bus_bytes_per_s = c.positive("bus_bytes_per_s");
    c.done("latency_s, bus_bytes_per_s");
  }
  r.done(joined(kCollectiveNames, kCollectiveKinds) + ", overlap");
  return links;
}

HostConfiguration read_configuration(const json& v, const std::string& where) {
  Reader r(v, where);
  HostConfiguration c;
  c.ranks_per_host = r.count("ranks_per_host");
  c.threads_per_rank = r.count("threads_per_rank");
  Reader kernels(r.get("kernels"), r.at("kernels"));
  for (DType d : kDtypes) {
    if (!kernels.has(dtype_name(d))) continue;
    Reader k(kernels.get(dtype_name(d)), kernels.at(dtype_name(d)));
    auto& curves = c.kernels[d];
    for (int i = 0; i < kKernelKinds; ++i)
      if (k.has(kKernelNames[i]))
        curves[i] = read_curve(k.get(kKernelNames[i]), k.at(kKernelNames[i]));
    k.done(joined(kKernelNames, kKernelKinds));
  }
  kernels.done("fp32, bf16, fp16");
  if (r.has("intra_host")) c.intra_host = read_links(r.get("intra_host"), r.at("intra_host"));
  if (r.has("storage")) {
    Reader st(r.get("storage"), r.at("storage"));
    c.storage.read_bytes_per_s = st.positive("read_bytes_per_s");
    c.storage.write_bytes_per_s = st.positive("write_bytes_per_s");
    st.done("read_bytes_per_s, write_bytes_per_s");
  }
  if (r.has("resident_baseline_bytes"))
    c.resident_baseline_bytes = r.positive("resident_baseline_bytes");
  r.done("ranks_per_host, threads_per_rank, kernels, intra_host, storage, resident_baseline_bytes");
  return c;
}

json curve_json(const RateCurve& c) {
  json a = json::array();
  for (const auto& [size, rate] : c.points) a.push_back({size, rate});
  return a;
}

json links_json(const Links& links) {
  json o = json::object();
  for (int k = 0; k < kCollectiveKinds; ++k)
    if (links[k].described())
      o[kCollectiveNames[k]] = {{"latency_s", links[k].latency_s},
                                {"bus_bytes_per_s", links[k].bus_bytes_per_s}};
  if (!o.empty()) o["overlap"] = links.overlap;
  return o;
}

}  // namespace

const char* kernel_kind_name(KernelKind kind) { return kKernelNames[static_cast<int>(kind)]; }
const char* collective_kind_name(CollectiveKind kind) {
  return kCollectiveNames[static_cast<int>(kind)];
}

double RateCurve::at(double size) const {
  if (points.empty()) return 0;
  if (size <= points.front().first) return points.front().second;
  if (size >= points.back().first) return points.back().second;
  const auto hi = std::upper_bound(points.begin(), points.end(), size,
                                   [](double s, const auto& p) { return s < p.first; });
  const auto lo = hi - 1;
  const double w = std::log(size / lo->first) / std::log(hi->first / lo->first);
  return lo->second + w * (hi->second - lo->second);
}

double LinkRate::seconds(CollectiveKind kind, double bytes, int n) const {
  if (n <= 1 || bytes <= 0) return 0;
  double factor = 1;
  if (kind == CollectiveKind::kAllReduce) factor = 2.0 * (n - 1) / n;
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather)
    factor = static_cast<double>(n - 1) / n;
  const int steps = kind == CollectiveKind::kSendRecv ? 1 : n - 1;
  return latency_s * steps + bytes * factor / bus_bytes_per_s;
}

const HostConfiguration& MachineDescription::configuration(int ranks_per_host) const {
  std::string have;
  for (const HostConfiguration& c : configurations) {
    if (c.ranks_per_host == ranks_per_host) return c;
    have += (have.empty() ? "" : ", ") + std::to_string(c.ranks_per_host);
  }
  throw Error("machine '" + name + "' has no rates for " + std::to_string(ranks_per_host) +
              " rank(s) a host (it has: " + have + "); calibrate with that many: mpirun -np " +
              std::to_string(ranks_per_host) + " tessera-plan --calibrate --machine FILE");
}

const HostConfiguration& MachineDescription::configuration_for_job(int world) const {
  int largest = 0;
  for (const HostConfiguration& c : configurations) largest = std::max(largest, c.ranks_per_host);
  const int per_host = std::min(world, largest);
  const int hosts_needed = (world + per_host - 1) / per_host;
  if (hosts_needed > hosts)
    throw Error("the layout needs " + std::to_string(world) + " ranks = " +
                std::to_string(hosts_needed) + " hosts of " + std::to_string(per_host) +
                " ranks, machine '" + name + "' has " + std::to_string(hosts));
  if (kind == "description") {
    const HostConfiguration* best = nullptr;
    for (const HostConfiguration& c : configurations)
      if (c.ranks_per_host >= per_host && (!best || c.ranks_per_host < best->ranks_per_host))
        best = &c;
    if (best) return *best;
  }
  return configuration(per_host);
}

MachineDescription parse_machine(const std::string& text, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(origin + ": not valid JSON: " + one_line(e.what()));
  }
  Reader r(doc, origin);
  MachineDescription m;
  m.name = r.text("name");
  m.kind = r.text("kind");
  if (m.kind != "measured" && m.kind != "description")
    Reader::fail(r.at("kind"), "expected \"measured\" or \"description\", got \"" + m.kind + "\"");
  m.source = r.text("source");
  m.hosts = r.count("hosts");
  m.cores_per_host = r.count("cores_per_host");
  m.memory_per_host_bytes = r.positive("memory_per_host_bytes");
  const json& configs = r.get("configurations");
  if (!configs.is_array() || configs.empty())
    Reader::fail(r.at("configurations"), "expected a list of at least one configuration");
  for (size_t i = 0; i < configs.size(); ++i) {
    const std::string where = r.at("configurations") + "[" + std::to_string(i) + "]";
    HostConfiguration c = read_configuration(configs[i], where);
    for (const HostConfiguration& seen : m.configurations)
      if (seen.ranks_per_host == c.ranks_per_host)
        Reader::fail(
            where, "a second configuration for ranks_per_host " + std::to_string(c.ranks_per_host));
    m.configurations.push_back(std::move(c));
  }
  if (r.has("inter_host")) m.inter_host = read_links(r.get("inter_host"), r.at("inter_host"));
  if (r.has("peak_flops_per_s")) {
    Reader peaks(r.get("peak_flops_per_s"), r.at("peak_flops_per_s"));
    for (DType d : kDtypes)
      if (peaks.has(dtype_name(d))) m.peak_flops_per_s[d] = peaks.positive(dtype_name(d));
    peaks.done("fp32, bf16, fp16");
  }
  r.done(
      "name, kind, source, hosts, cores_per_host, memory_per_host_bytes, configurations, "
      "inter_host, peak_flops_per_s");
  return m;
}

MachineDescription read_machine(const std::string& path) {
  if (!machine_file_exists(path)) throw Error("--machine " + path + ": cannot read the file");
  return parse_machine(read_file(path, "the machine description"), path);
}

std::string machine_json(const MachineDescription& m) {
  json o;
  o["name"] = m.name;
  o["kind"] = m.kind;
  o["source"] = m.source;
  o["hosts"] = m.hosts;
  o["cores_per_host"] = m.cores_per_host;
  o["memory_per_host_bytes"] = m.memory_per_host_bytes;
  o["configurations"] = json::array();
  for (const HostConfiguration& c : m.configurations) {
    json cj;
    cj["ranks_per_host"] = c.ranks_per_host;
    cj["threads_per_rank"] = c.threads_per_rank;
    cj["kernels"] = json::object();
    for (const auto& [dtype, curves] : c.kernels) {
      json k = json::object();
      for (int i = 0; i < kKernelKinds; ++i)
        if (!curves[i].empty()) k[kKernelNames[i]] = curve_json(curves[i]);
      cj["kernels"][dtype_name(dtype)] = k;
    }
    const json links = links_json(c.intra_host);
    if (!links.empty()) cj["intra_host"] = links;
    if (c.storage.described())
      cj["storage"] = {{"read_bytes_per_s", c.storage.read_bytes_per_s},
                       {"write_bytes_per_s", c.storage.write_bytes_per_s}};
    if (c.resident_baseline_bytes > 0) cj["resident_baseline_bytes"] = c.resident_baseline_bytes;
    o["configurations"].push_back(cj);
  }
  const json inter = links_json(m.inter_host);
  if (!inter.empty()) o["inter_host"] = inter;
  for (const auto& [dtype, peak] : m.peak_flops_per_s)
    o["peak_flops_per_s"][dtype_name(dtype)] = peak;
  return o.dump(1) + "\n";
}

void write_machine(const MachineDescription& m, const std::string& path) {
  const std::string text = machine_json(m);
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

bool machine_file_exists(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  if (!S_ISREG(st.st_mode)) throw Error("--machine " + path + ": not a regular file");
  return true;
}

void check_machine_writable(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0) throw Error("--machine " + path + ": cannot write in " + dir);
}

void set_configuration(MachineDescription& m, HostConfiguration c) {
  std::erase_if(m.configurations,
                [&](const HostConfiguration& x) { return x.ranks_per_host == c.ranks_per_host; });
  m.configurations.push_back(std::move(c));
  std::sort(m.configurations.begin(), m.configurations.end(),
            [](const HostConfiguration& a, const HostConfiguration& b) {
              return a.ranks_per_host < b.ranks_per_host;
            });
}

int host_cores() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace tessera::plan
