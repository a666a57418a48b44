#include "tessera/numerics/numerics_diff.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::numerics {
namespace {

int pass_rank(const std::string& pass) {
  if (pass == "forward") return 0;
  if (pass == "backward") return 1;
  if (pass == "grads") return 2;
  throw Error("unknown pass '" + pass + "'");
}

std::string describe(const NumericsKey& k) {
  const auto& [it, pass, mb, order, tensor] = k;
  std::string s = "iteration " + std::to_string(it) + ", ";
  if (pass == 2) return s + "parameter gradient " + tensor;
  s += "micro-batch (first sample " + std::to_string(mb) + "), ";
  s += pass == 0 ? "forward, " : "backward, ";
  // order: forward layer + 1 (embedding 0); backward: -(layer), the head's gradient first.
  const int64_t layer = pass == 0 ? order - 1 : -order;
  if (pass == 0 && layer < 0) return s + "embedding output";
  if (tensor == "head input-grad")
    return s + "the head's input gradient (after layer " + std::to_string(layer - 1) + ")";
  return s + "layer " + std::to_string(layer) + " " + tensor;
}

double norm(const NumericsRecord& r) { return std::sqrt(r.sum_sq); }

// A figure of a record: JSON has no NaN or Inf, so a non-finite one is written as null (an fp16
// step whose gradients overflowed) and read back as NaN.
double number(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  return v.is_null() ? NAN : v.get<double>();
}

// Equal, NaN included (the same layout's runs overflow alike).
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }
double mean(const NumericsRecord& r) { return r.count ? r.sum / r.count : 0.0; }

std::string figures(const NumericsRecord& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "norm %.9g, max|x| %.9g, mean %.9g, %" PRId64 " elements, checksum %016" PRIx64,
                norm(r), r.max_abs, mean(r), r.count, r.checksum);
  return buf;
}

}  // namespace

NumericsRun read_numerics(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw Error(dir + ": not a --dump-numerics directory");
  std::map<int, std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    int rank = -1;
    if (std::sscanf(name.c_str(), "numerics.rank%d.jsonl", &rank) == 1 &&
        name == "numerics.rank" + std::to_string(rank) + ".jsonl")
      files[rank] = e.path().string();
  }
  if (files.empty()) throw Error(dir + ": no numerics.rank<R>.jsonl files");
  NumericsRun run;
  for (const auto& [rank, path] : files) {  // rank order: the same merge order every time
    std::ifstream in(path);
    std::string line;
    int64_t line_no = 0;
    try {
      while (std::getline(in, line)) {
        ++line_no;
        const nlohmann::json j = nlohmann::json::parse(line);
        if (line_no == 1) {
          if (j.value("format", "") != "tessera-numerics-1")
            throw Error(
                "not a Tessera numerics dump (expected \"format\": \"tessera-numerics-1\")");
          const std::string layout = j.at("layout").get<std::string>();
          const int world = j.at("world_size").get<int>();
          if (run.world_size == 0) {
            run.layout = layout;
            run.world_size = world;
          } else if (layout != run.layout || world != run.world_size) {
            throw Error("another run's file (layout " + layout + ", not " + run.layout + ")");
          }
          continue;
        }
        const int pass = pass_rank(j.at("pass").get<std::string>());
        const int layer = j.at("layer").get<int>();
        const int64_t order = pass == 0 ? layer + 1 : pass == 1 ? -layer : 0;
        const NumericsKey key{j.at("it").get<int64_t>(), pass, j.at("mb").get<int64_t>(), order,
                              j.at("tensor").get<std::string>()};
        NumericsRecord& r = run.records[key];
        r.sum_sq += number(j, "sum_sq");
        r.sum += number(j, "sum");
        const double m = number(j, "max_abs");
        r.max_abs = std::isnan(m) || std::isnan(r.max_abs) ? NAN : std::max(r.max_abs, m);
        r.count += j.at("count").get<int64_t>();
        r.checksum += std::stoull(j.at("checksum").get<std::string>(), nullptr, 16);
        ++r.parts;
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": malformed record: " + e.what());
    } catch (const Error& e) {
      throw Error(path + ":" + std::to_string(line_no) + ": " + e.what());
    } catch (const std::logic_error& e) {  // stoull
      throw Error(path + ":" + std::to_string(line_no) + ": malformed checksum");
    }
    if (line_no == 0) throw Error(path + ": empty");
  }
  if (static_cast<int>(files.size()) != run.world_size)
    throw Error(dir + ": " + std::to_string(files.size()) + " rank files of a " +
                std::to_string(run.world_size) + "-rank run");
  return run;
}

namespace {
// The micro-batch size in a layout string ("...mbs2..."), "" if absent.
std::string micro_batch_size(const std::string& layout) {
  const size_t at = layout.find(".mbs");
  if (at == std::string::npos) return "";
  return layout.substr(at + 4, layout.find('.', at + 4) - (at + 4));
}
}  // namespace

Divergence localize(const NumericsRun& a, const NumericsRun& b, double rtol) {
  // A micro-batch is named by its first sample: with other micro-batch sizes the same name
  // would stand for other samples.
  if (micro_batch_size(a.layout) != micro_batch_size(b.layout))
    throw Error("the runs' micro-batch sizes differ (layouts " + a.layout + " and " + b.layout +
                "): their records hold different samples; dump both with the same "
                "--micro-batch-size");
  Divergence d;
  d.exact = a.layout == b.layout;
  for (const auto& [key, ra] : a.records) {
    const auto it = b.records.find(key);
    if (it == b.records.end()) continue;
    const NumericsRecord& rb = it->second;
    ++d.compared;
    bool differs;
    if (d.exact) {
      differs = !same(ra.sum_sq, rb.sum_sq) || !same(ra.sum, rb.sum) ||
                !same(ra.max_abs, rb.max_abs) || ra.count != rb.count || ra.checksum != rb.checksum;
    } else {
      // The sum against its natural scale, norm x sqrt(elements) (so near-zero sums do not
      // divide by zero). Element counts are not compared: layouts pad the vocabulary
      // differently, and the padded rows' gradients are zeros.
      const double sum_scale =
          norm(rb) * std::sqrt(static_cast<double>(std::max(ra.count, rb.count)));
      const auto off = [&](double x, double y, double scale) {
        if (std::isnan(x) || std::isnan(y)) return !same(x, y);
        return !(std::fabs(x - y) <= rtol * std::max(scale, 1e-30));
      };
      differs = off(norm(ra), norm(rb), norm(rb)) || off(ra.max_abs, rb.max_abs, rb.max_abs) ||
                off(ra.sum, rb.sum, sum_scale);
    }
    if (!differs) continue;
    d.found = true;
    d.where = describe(key);
    d.detail = "A: " + figures(ra) + "\n  B: " + figures(rb);
    return d;
  }
  return d;
}

}  // namespace tessera::numerics
