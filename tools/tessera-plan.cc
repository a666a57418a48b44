// tessera-plan: predicts what a layout will cost before a job is launched.
//
//   tessera-plan --evaluate --world-size N [--json] <tessera-train's flags>
//
// Takes exactly tessera-train's flags (model, parallel sizes, batch, precision, ZeRO,
// recomputation, --config, --deepspeed_config ...) and predicts, for every rank of that layout on
// N ranks, the memory by category (the memory report's theory) and the memory accountant's peak,
// which tessera-train reports as `peak_mem_bytes` (plan/memory_prediction.h). Nothing is
// allocated and MPI is not started: a 70 B model's layout is planned on a laptop.
//
// With --json the output is {"ranks": [{"rank": r, "coords": {...}, "memory_bytes": {category:
// bytes}, "peak_bytes": n}, ...], "step_time_s": null, "components_s": {}} — the step-time model is
// not built yet, and says so with null rather than a number. Bad flags or sizes that do not fit:
// one line on stderr, exit code 2.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/comm/parallel_state.h"
#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/plan/memory_prediction.h"
#include "tessera/train/arguments.h"
#include "tessera/train/deepspeed_config.h"
#include "tessera/train/rank_layout.h"

namespace {

using tessera::Error;
namespace train = tessera::train;

constexpr const char* kTool = "tessera-plan";

constexpr const char* kUsage =
    "usage: tessera-plan --evaluate --world-size N [--json] <tessera-train's flags>\n"
    "Predicts every rank's memory by category and the memory accountant's peak (peak_mem_bytes)\n"
    "for that layout on N ranks, without running it (docs/planning.md). tessera-train's flags:\n"
    "tessera-train --help.\n";

// tessera-plan's own flags, taken out of argv before the rest goes to tessera-train's parser.
struct PlanFlags {
  bool evaluate = false, json = false, help = false;
  int world_size = 0;
  std::vector<const char*> train_argv;
};

int parse_count(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const int n = std::stoi(value, &used);
    if (used == value.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  throw Error(flag + " '" + value + "': expected a whole number >= 1");
}

PlanFlags split_flags(int argc, char** argv) {
  PlanFlags f;
  f.train_argv.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      f.help = true;
    } else if (a == "--evaluate") {
      f.evaluate = true;
    } else if (a == "--json") {
      f.json = true;
    } else if (a == "--world-size") {
      if (i + 1 >= argc) throw Error("--world-size: expected a number of ranks after it");
      f.world_size = parse_count(a, argv[++i]);
    } else if (a.rfind("--world-size=", 0) == 0) {
      f.world_size = parse_count("--world-size", a.substr(13));
    } else {
      f.train_argv.push_back(argv[i]);
    }
  }
  return f;
}

// tessera-train's steps from flags to a validated layout (train_main.cc), without the runtime.
tessera::comm::MeshLayout prepare(train::TrainArgs& args, int world_size) {
  train::resolve_argument_files(args);
  if (args.sequence_parallel && args.tensor_model_parallel_size == 1)
    args.sequence_parallel = false;
  train::check_expert_tensor_parallel_size(args);
  tessera::comm::MeshLayout mesh(world_size, train::parallel_config(args));
  if (mesh.expert() > 1) args.model.validate_expert_parallel(mesh.expert());
  const int dp = mesh.data();
  if (args.deepspeed) train::apply_deepspeed_config(args, dp);
  train::apply_step_batch_size_schedule(args);
  if (args.global_batch_size == 0) args.global_batch_size = args.micro_batch_size * dp;
  train::validate_arguments(args, dp);
  return mesh;
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

int evaluate(const PlanFlags& f) {
  train::TrainArgs args;
  if (!train::parse_arguments(static_cast<int>(f.train_argv.size()), f.train_argv.data(), args))
    return 0;
  const tessera::comm::MeshLayout mesh = prepare(args, f.world_size);
  const int threads = threads_per_rank(args, f.world_size);
  const std::vector<train::RankLayout> ranks = train::rank_layouts(args, mesh, threads);
  nlohmann::json out;
  out["ranks"] = nlohmann::json::array();
  if (!f.json)
    std::printf("%s; %d kernel thread(s) a rank\nrank  tp cp dp pp | MiB: %s | peak\n",
                mesh.summary().c_str(), threads,
                "parameters gradients optimizer activations buffers other");
  for (int rank = 0; rank < mesh.world_size(); ++rank) {
    const tessera::plan::RankMemoryPrediction p =
        tessera::plan::predict_rank_memory(args.model, ranks[rank]);
    const tessera::comm::MeshCoords at = mesh.coords(rank);
    if (f.json) {
      nlohmann::json r;
      r["rank"] = rank;
      r["coords"] = {{"tp", at.tp}, {"cp", at.cp}, {"dp", at.dp}, {"pp", at.pp}};
      for (int k = 0; k < train::kReportCategories; ++k)
        r["memory_bytes"][json_key(k)] = static_cast<int64_t>(p.categories[k]);
      r["peak_bytes"] = static_cast<int64_t>(p.peak_bytes);
      out["ranks"].push_back(r);
      continue;
    }
    std::string line;
    for (double bytes : p.categories) line += " " + mib(bytes);
    std::printf("%4d %3d %2d %2d %2d |%s | %s\n", rank, at.tp, at.cp, at.dp, at.pp, line.c_str(),
                mib(p.peak_bytes).c_str());
  }
  if (f.json) {
    out["step_time_s"] = nullptr;
    out["components_s"] = nlohmann::json::object();
    std::printf("%s\n", out.dump(1).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const PlanFlags f = split_flags(argc, argv);
    if (f.help) {
      std::printf("%s", kUsage);
      return 0;
    }
    if (!f.evaluate)
      throw Error(
          "only --evaluate is implemented: give --evaluate --world-size N and tessera-train's "
          "flags (the search over layouts is not built yet)");
    if (f.world_size == 0) throw Error("--evaluate needs --world-size N (the number of ranks)");
    return evaluate(f);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return tessera::kUserErrorExitCode;
  } catch (const std::exception& e) {  // a defect, not the user's input: tool_main.h's contract
    std::fprintf(stderr, "%s: internal error: %s\n", kTool, e.what());
    return 1;
  }
}
