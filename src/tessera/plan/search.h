// The search over layouts: every way to run a job on N ranks of a machine that tessera-train
// accepts, predicted (memory: plan/memory_prediction.h, time: plan/step_time.h), the ones that
// fit ranked by step time.
//
// A candidate is a list of tessera-train flags: the user's flags plus the layout flags the search
// chose, so what is evaluated is exactly what the printed command runs. Any layout flag the user
// gives is held fixed (a constraint); the others are searched:
//   --tensor-model-parallel-size t (t divides N and the attention heads), --sequence-parallel
//   (on and off when t > 1), --pipeline-model-parallel-size p (p divides N / t and the layers),
//   --context-parallel-size c (c divides N / (t p), the sequence divides into 2c chunks; the
//   user's --cp-comm-type, default p2p), --expert-model-parallel-size e (an MoE model: e divides
//   N / (t p) and the experts),
//   --num-layers-per-virtual-pipeline-stage (2 virtual stages when they divide the layers),
//   --micro-batch-size (powers of 2 dividing the global batch's share of a data-parallel rank),
//   --zero-stage 0-3 (1-3 only with data parallelism), and recomputation (none, selective, full
//   uniform 1).
// A candidate fits when every rank's predicted peak (the memory accountant's) is at most the
// machine's memory per rank (memory per host / ranks per host).
#pragma once

#include <string>
#include <vector>

#include "tessera/plan/machine.h"
#include "tessera/plan/step_time.h"

namespace tessera::plan {

struct Candidate {
  std::vector<std::string> flags;  // the layout flags the search chose (the user's not repeated)
  std::string summary;             // "TP 2 SP, PP 1, DP 1, mbs 4, ZeRO 0, recompute none"
  double peak_bytes = 0;           // the largest rank's predicted accountant peak
  StepTimePrediction time;
  double mfu = 0;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // candidates that fit, fastest first
  int considered = 0;             // flag combinations tried
  int refused = 0;                // of them, refused as tessera-train would (sizes, schedule)
  std::string first_refusal;      // why the first refused one was
  int too_big = 0;                // valid but over the memory per rank
  Candidate smallest;             // the valid candidate with the smallest peak (when none fits)
  double memory_per_rank = 0;
};

// `user_flags`: tessera-train's flags as given (without the program name). tessera::Error when
// they fail on their own (a bad flag) or the model is not covered by the step-time model.
SearchResult search_layouts(const std::vector<std::string>& user_flags, int world_size,
                            const MachineDescription& machine);

}  // namespace tessera::plan
