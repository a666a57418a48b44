// tessera-plan: predicts what a layout will cost before a job is launched.
//
//   tessera-plan --world-size N --machine FILE [--top K] <tessera-train's flags>
//   tessera-plan --evaluate --world-size N [--machine FILE] [--json] <tessera-train's flags>
//   [mpirun -np R] tessera-plan --calibrate --machine FILE [--name NAME] [--quick]
//                               [--nvme-path DIR]
//
// Without --evaluate it searches: every layout of N ranks the flags leave open, predicted, those
// that fit the machine's memory ranked by step time (plan/search.h).
//
// --evaluate takes exactly tessera-train's flags (model, parallel sizes, batch, precision, ZeRO,
// recomputation, --config, --deepspeed_config ...) and predicts, for every rank of that layout on
// N ranks, the memory by category (the memory report's theory) and the memory accountant's peak,
// which tessera-train reports as `peak_mem_bytes` (plan/memory_prediction.h). With a machine
// description it also predicts the step time by component (plan/step_time.h). Nothing is
// allocated and MPI is not started: a 70 B model's layout is planned on a laptop.
//
// --calibrate measures this machine's rates with R ranks on it (plan/calibrate.h) and adds them
// to FILE (created if absent; a configuration for R ranks already there is replaced). With
// --nvme-path DIR it also measures DIR's direct-I/O rates (the storage NVMe offload streams to).
//
// With --json the output is {"ranks": [{"rank": r, "coords": {...}, "memory_bytes": {category:
// bytes}, "peak_bytes": n, "kept_activations_bytes": n, "resident_blocks_bytes": n,
// "resident_bytes": n, "step_time_s": t, "compute_gemm_s": t}, ...], "step_time_s": t,
// "components_s":
// {...}, "compute_gemm_s": t, ...} (compute_gemm_s: the products' part of the compute component,
// what tessera-train's metrics file measures as gemm_s); step_time_s is null without --machine.
// resident_blocks_bytes: the accountant's blocks' pages resident at the peak; resident_bytes (with
// a machine whose description has a resident baseline): the process's peak resident set, those
// pages and the baseline, what the memory report measures as "peak resident set of the process".
// Bad flags, files or sizes that do not fit: one line on stderr, exit code 2.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/comm/hosts.h"
#include "tessera/comm/parallel_state.h"
#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/kernels/build_info.h"
#include "tessera/plan/calibrate.h"
#include "tessera/plan/machine.h"
#include "tessera/plan/memory_prediction.h"
#include "tessera/plan/search.h"
#include "tessera/plan/step_time.h"
#include "tessera/train/arguments.h"
#include "tessera/train/rank_layout.h"

namespace {

using tessera::Error;
namespace train = tessera::train;

constexpr const char* kTool = "tessera-plan";
// Beyond this the per-rank layouts take minutes: a typo rather than a plan.
constexpr int kMaxWorldSize = 100'000;

constexpr const char* kUsage =
    "usage: tessera-plan --world-size N --machine FILE [--top K] <tessera-train's flags>\n"
    "       tessera-plan --evaluate --world-size N [--machine FILE] [--json] <tessera-train's "
    "flags>\n"
    "       [mpirun -np R] tessera-plan --calibrate --machine FILE [--name NAME] [--quick]\n"
    "                                   [--nvme-path DIR]\n"
    "Without --evaluate: every layout of N ranks (TP, SP, PP, virtual stages, DP, micro-batch,\n"
    "ZeRO stage, recomputation; any of them given as a flag is held fixed) predicted on the\n"
    "machine, those that fit its memory ranked by step time, with the mpirun command of each.\n"
    "--evaluate predicts one layout: every rank's memory by category and the memory accountant's\n"
    "peak (peak_mem_bytes), and with --machine its step time by component. --calibrate measures\n"
    "this machine's rates with R ranks on it and adds them to FILE (docs/planning.md).\n"
    "tessera-train's flags: tessera-train --help.\n";

// tessera-plan's own flags, taken out of argv before the rest goes to tessera-train's parser.
struct PlanFlags {
  bool evaluate = false, calibrate = false, quick = false, json = false, help = false;
  int world_size = 0, top = 10, explain = -1;
  bool top_given = false;
  std::string machine, name, nvme_path;
  std::vector<const char*> train_argv;
};

int parse_count(const std::string& flag, const std::string& value, int least = 1) {
  try {
    size_t used = 0;
    const int n = std::stoi(value, &used);
    if (used == value.size() && n >= least) return n;
  } catch (const std::exception&) {
  }
  throw Error(flag + " '" + value + "': expected a whole number >= " + std::to_string(least));
}

PlanFlags split_flags(int argc, char** argv) {
  PlanFlags f;
  f.train_argv.push_back(argv[0]);
  // A flag of ours with a value, as "--flag value" or "--flag=value": its value, else nullptr.
  int i = 1;
  const auto value_of = [&](const std::string& a, const char* flag) -> const char* {
    const std::string name = flag;
    if (a == name) {
      if (i + 1 >= argc) throw Error(name + ": expected a value after it");
      return argv[++i];
    }
    if (a.rfind(name + "=", 0) == 0) return argv[i] + name.size() + 1;
    return nullptr;
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
    } else if (a == "--evaluate") {
      f.evaluate = true;
    } else if (a == "--json") {
      f.json = true;
    } else if (a == "--calibrate") {
      f.calibrate = true;
    } else if (a == "--quick") {
      f.quick = true;
    } else if (const char* v = value_of(a, "--machine")) {
      f.machine = v;
    } else if (const char* v = value_of(a, "--name")) {
      f.name = v;
    } else if (const char* v = value_of(a, "--nvme-path")) {
      f.nvme_path = v;
    } else if (const char* v = value_of(a, "--explain")) {
      f.explain = parse_count("--explain", v, 0);
    } else if (const char* v = value_of(a, "--top")) {
      f.top = parse_count("--top", v);
      f.top_given = true;
    } else if (const char* v = value_of(a, "--world-size")) {
      f.world_size = parse_count("--world-size", v);
      if (f.world_size > kMaxWorldSize)
        throw Error("--world-size " + std::to_string(f.world_size) + ": at most " +
                    std::to_string(kMaxWorldSize) + " ranks are planned");
    } else {
      f.train_argv.push_back(argv[i]);
    }
  }
  // Flags that would be ignored where they were given are refused instead.
  if ((f.quick || !f.name.empty() || !f.nvme_path.empty()) && !f.calibrate)
    throw Error(std::string(f.quick           ? "--quick"
                            : !f.name.empty() ? "--name"
                                              : "--nvme-path") +
                " applies to --calibrate only");
  if (f.calibrate && (f.evaluate || f.world_size > 0))
    throw Error("--calibrate measures this machine: give it without --evaluate and --world-size");
  if (f.explain >= 0 && (!f.evaluate || f.machine.empty() || f.json))
    throw Error("--explain RANK needs --evaluate and --machine, without --json");
  if (f.top_given && f.evaluate) throw Error("--top applies to the search (without --evaluate)");
  return f;
}

// Threads a rank's kernels run on: --num-threads, else tessera-train's default for N ranks on
// this machine (its cores shared by the ranks).
int threads_per_rank(const train::TrainArgs& args, int world_size) {
  if (args.num_threads > 0) return args.num_threads;
  const int cores = tessera::default_num_threads();
  return std::max(1, cores / world_size);
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / (1 << 20));
  return buf;
}

const char* json_key(int category) {
  static const char* const keys[train::kReportCategories] = {
      "parameters", "gradients", "optimizer", "activations", "communication_buffers", "other"};
  return keys[category];
}

// The step-time components in output order.
std::vector<std::pair<const char*, double>> component_list(
    const tessera::plan::StepTimeComponents& c) {
  return {
      {"compute", c.compute}, {"tp_comm", c.tp_comm},     {"pipeline_bubble", c.pipeline_bubble},
      {"dp_comm", c.dp_comm}, {"optimizer", c.optimizer}, {"offload_io", c.offload_io}};
}

int evaluate(const PlanFlags& f) {
  train::TrainArgs args;
  if (!train::parse_arguments(static_cast<int>(f.train_argv.size()), f.train_argv.data(), args))
    return 0;
  const tessera::comm::MeshLayout mesh = train::prepare_layout(args, f.world_size);
  // Everything that can fail is done before anything is printed.
  tessera::plan::MachineDescription machine;
  int threads = threads_per_rank(args, f.world_size);
  if (!f.machine.empty()) {
    machine = tessera::plan::read_machine(f.machine);
    // The machine's own thread count a rank, unless --num-threads says otherwise (a measured
    // machine then refuses a count it was not measured with).
    if (args.num_threads <= 0)
      threads = machine.configuration_for_job(f.world_size).threads_per_rank;
  }
  if (f.explain >= f.world_size)
    throw Error("--explain " + std::to_string(f.explain) + ": the layout has ranks 0.." +
                std::to_string(f.world_size - 1));
  const std::vector<train::RankLayout> ranks = train::rank_layouts(args, mesh, threads);
  std::vector<tessera::plan::RankMemoryPrediction> memory;
  for (int rank = 0; rank < mesh.world_size(); ++rank)
    memory.push_back(tessera::plan::predict_rank_memory(args.model, ranks[rank]));
  tessera::plan::StepTimePrediction time;
  double mfu = 0;
  if (!f.machine.empty()) {
    time = tessera::plan::predict_step_time(args.model, mesh, ranks, machine);
    mfu = tessera::plan::predicted_mfu(args.model, args.global_batch_size, mesh.world_size(), time,
                                       machine, ranks[0].compute);
  }

  // The resident set: the blocks' pages at the peak and what the machine's ranks hold beside
  // them (its description's measured baseline; none: not predicted).
  const double baseline =
      f.machine.empty() ? 0 : machine.configuration_for_job(f.world_size).resident_baseline_bytes;
  nlohmann::json out;
  out["ranks"] = nlohmann::json::array();
  if (!f.json)
    std::printf("%s; %d kernel thread(s) a rank\nrank  tp cp dp pp | MiB: %s | peak%s\n",
                mesh.summary().c_str(), threads,
                "parameters gradients optimizer activations buffers other",
                baseline > 0 ? " | resident set" : "");
  for (int rank = 0; rank < mesh.world_size(); ++rank) {
    const tessera::plan::RankMemoryPrediction& p = memory[rank];
    const tessera::comm::MeshCoords at = mesh.coords(rank);
    if (f.json) {
      nlohmann::json r;
      r["rank"] = rank;
      r["coords"] = {{"tp", at.tp}, {"cp", at.cp}, {"dp", at.dp}, {"pp", at.pp}};
      for (int k = 0; k < train::kReportCategories; ++k)
        r["memory_bytes"][json_key(k)] = static_cast<int64_t>(p.categories[k]);
      r["peak_bytes"] = static_cast<int64_t>(p.peak_bytes);
      r["kept_activations_bytes"] = static_cast<int64_t>(p.kept_activations);
      r["resident_blocks_bytes"] = static_cast<int64_t>(p.resident_blocks_bytes);
      if (baseline > 0)
        r["resident_bytes"] = static_cast<int64_t>(p.resident_blocks_bytes + baseline);
      if (!f.machine.empty()) {
        r["step_time_s"] = time.ranks[rank].total();
        r["compute_gemm_s"] = time.ranks[rank].compute_gemm;
      }
      out["ranks"].push_back(r);
      continue;
    }
    std::string line;
    for (double bytes : p.categories) line += " " + mib(bytes);
    std::printf("%4d %3d %2d %2d %2d |%s | %s%s\n", rank, at.tp, at.cp, at.dp, at.pp, line.c_str(),
                mib(p.peak_bytes).c_str(),
                baseline > 0 ? (" | " + mib(p.resident_blocks_bytes + baseline)).c_str() : "");
  }
  if (f.machine.empty()) {
    if (f.json) {
      out["step_time_s"] = nullptr;
      out["components_s"] = nlohmann::json::object();
      std::printf("%s\n", out.dump(1).c_str());
    }
    return 0;
  }
  const auto parts = component_list(time.components);
  if (f.json) {
    out["step_time_s"] = time.step_s;
    out["components_s"] = nlohmann::json::object();
    for (const auto& [name, seconds] : parts) out["components_s"][name] = seconds;
    out["compute_gemm_s"] = time.components.compute_gemm;  // of compute: the products
    out["critical_rank"] = time.critical_rank;
    out["mfu"] = mfu;
    out["machine"] = {
        {"name", machine.name}, {"kind", machine.kind}, {"ranks_per_host", time.ranks_per_host}};
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  if (f.explain >= 0) {
    std::printf("%s",
                tessera::plan::explain_step_time(args.model, mesh, ranks, machine, time, f.explain)
                    .c_str());
  }
  std::printf("step time on '%s' (%s, %d rank(s) a host): %.4f s, MFU %.1f%%; rank %d's:",
              machine.name.c_str(), machine.kind.c_str(), time.ranks_per_host, time.step_s,
              100 * mfu, time.critical_rank);
  for (const auto& [name, seconds] : parts) std::printf(" %s %.4f", name, seconds);
  std::printf("\n");
  return 0;
}

// The ranked table of layouts (plan/search.h).
int search(const PlanFlags& f) {
  if (f.machine.empty())
    throw Error(
        "the search needs --machine FILE (a description: tessera-plan --calibrate, or "
        "examples/machines/)");
  const tessera::plan::MachineDescription machine = tessera::plan::read_machine(f.machine);
  const std::vector<std::string> user(f.train_argv.begin() + 1, f.train_argv.end());
  const tessera::plan::SearchResult r = tessera::plan::search_layouts(user, f.world_size, machine);
  const double gib = 1024.0 * 1024 * 1024;
  if (r.refused == r.considered)
    throw Error("no layout of " + std::to_string(f.world_size) +
                " ranks runs with these flags; the first tried: " + r.first_refusal);
  if (r.ranked.empty()) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "no layout of %d ranks fits in %.2f GiB a rank (machine '%s'): the smallest "
                  "predicted peak is %.2f GiB (%s); give more ranks (--world-size) or a machine "
                  "with more memory a rank",
                  f.world_size, r.memory_per_rank / gib, machine.name.c_str(),
                  r.smallest.peak_bytes / gib, r.smallest.summary.c_str());
    throw Error(line);
  }
  std::printf(
      "%d layouts of %d ranks tried on '%s' (%s): %d refused as tessera-train would, %d "
      "over %.2f GiB a rank, %zu fit; the fastest %d:\n",
      r.considered, f.world_size, machine.name.c_str(), machine.kind.c_str(), r.refused, r.too_big,
      r.memory_per_rank / gib, r.ranked.size(),
      std::min<int>(f.top, static_cast<int>(r.ranked.size())));
  std::string user_flags;
  for (const std::string& s : user) user_flags += " " + s;
  for (int i = 0; i < f.top && i < static_cast<int>(r.ranked.size()); ++i) {
    const tessera::plan::Candidate& c = r.ranked[i];
    std::printf("%2d. %s\n    step %.4f s, MFU %.1f%%, peak %.3f GiB;", i + 1, c.summary.c_str(),
                c.time.step_s, 100 * c.mfu, c.peak_bytes / gib);
    for (const auto& [name, seconds] : component_list(c.time.components))
      std::printf(" %s %.4f", name, seconds);
    std::string layout;
    for (const std::string& s : c.flags) layout += " " + s;
    std::printf("\n    mpirun -np %d tessera-train%s%s\n", f.world_size, user_flags.c_str(),
                layout.c_str());
  }
  return 0;
}

// Measures this machine with every rank of the job on it and merges the configuration into the
// description at f.machine (rank 0 writes it). Everything that can be refused is checked before
// MPI starts; an error after that ends the job once on every rank (comm::run_on_ranks).
int calibrate(const PlanFlags& f) {
  if (f.machine.empty()) throw Error("--calibrate needs --machine FILE (the description to write)");
  tessera::plan::MachineDescription m;
  const bool existing = tessera::plan::machine_file_exists(f.machine);
  if (existing) m = tessera::plan::read_machine(f.machine);  // checked before measuring
  tessera::plan::check_machine_writable(f.machine);
  // Before minutes of measuring: the directory must take direct I/O.
  if (!f.nvme_path.empty()) tessera::plan::require_storage_dir(f.nvme_path);
  auto world = tessera::comm::ProcessGroup::world();
  int rc = 0;
  try {
    rc = tessera::comm::run_on_ranks(*world, kTool, [&] {
      const std::vector<std::string> hosts = tessera::comm::gather_host_names(*world);
      for (const std::string& h : hosts)
        if (h != hosts.front())
          throw Error(
              "--calibrate measures one host: run it with the ranks of one host (ranks on " +
              hosts.front() + " and " + h + ")");
      const int ranks = world->size();
      // The trainer's default for this many ranks on this host (cores / local ranks).
      const int threads = tessera::default_num_threads();
      tessera::plan::HostConfiguration conf = tessera::plan::calibrate_host(
          *world, threads, {tessera::DType::kBF16, tessera::DType::kF16}, f.quick);
      if (!f.nvme_path.empty())
        conf.storage = tessera::plan::calibrate_storage(*world, f.nvme_path, f.quick);
      if (world->rank() == 0) {
        if (!existing) {
          m.name = f.name.empty() ? "this machine" : f.name;
          m.kind = "measured";
          m.hosts = 1;
          m.cores_per_host = tessera::plan::host_cores();
          m.memory_per_host_bytes = tessera::host_memory_bytes();
        } else if (!f.name.empty()) {
          m.name = f.name;
        }
        m.source = "tessera-plan --calibrate; " + tessera::kernels::version_line();
        // Without --nvme-path, storage rates measured before for this many ranks are kept.
        if (!conf.storage.described())
          for (const tessera::plan::HostConfiguration& before : m.configurations)
            if (before.ranks_per_host == conf.ranks_per_host) conf.storage = before.storage;
        tessera::plan::set_configuration(m, std::move(conf));
        tessera::plan::write_machine(m, f.machine);
        std::printf("%s: %d rank(s) x %d thread(s) measured into %s\n", kTool, ranks, threads,
                    f.machine.c_str());
      }
      world->barrier().wait();
      return 0;
    });
  } catch (...) {
    tessera::comm::shutdown();
    throw;
  }
  tessera::comm::shutdown();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const PlanFlags f = split_flags(argc, argv);
    if (f.help) {
      std::printf("%s", kUsage);
      return 0;
    }
    if (f.calibrate) return calibrate(f);
    if (f.world_size == 0) throw Error("give --world-size N (the number of ranks)");
    return f.evaluate ? evaluate(f) : search(f);
  } catch (const Error& e) {
    // Under mpirun (--calibrate) every rank meets the same flag error: launcher rank 0 says it.
    if (tessera::launcher_rank() == 0) std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return tessera::kUserErrorExitCode;
  } catch (const std::exception& e) {  // a defect, not the user's input: tool_main.h's contract
    std::fprintf(stderr, "%s: internal error: %s\n", kTool, e.what());
    return 1;
  }
}
