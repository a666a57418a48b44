// The context-parallel options of tessera-train: Megatron-DeepSpeed's Ulysses flag mapped onto
// Megatron's, and their checks (arguments.h; docs/context_parallel.md).
#include <algorithm>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/train/arguments.h"

namespace tessera::train {

void apply_ds_sequence_parallel(TrainArgs& args) {
  const int n = args.ds_sequence_parallel_size;
  if (!args.given(&TrainArgs::ds_sequence_parallel_size)) return;
  if (args.given(&TrainArgs::context_parallel_size) && args.context_parallel_size != n)
    throw Error("--ds-sequence-parallel-size " + std::to_string(n) +
                " and --context-parallel-size " + std::to_string(args.context_parallel_size) +
                " disagree (Ulysses is context parallelism with --cp-comm-type a2a): give one");
  if (args.given(&TrainArgs::cp_comm_type) &&
      (args.cp_comm_type.size() != 1 || args.cp_comm_type[0] != "a2a")) {
    std::string given;
    for (const std::string& t : args.cp_comm_type) given += " " + t;
    throw Error("--ds-sequence-parallel-size is Ulysses (--cp-comm-type a2a); --cp-comm-type" +
                given + " contradicts it");
  }
  args.context_parallel_size = n;
  args.cp_comm_type = {"a2a"};
}

void validate_context_parallel(const TrainArgs& args) {
  const int N = args.context_parallel_size, L = args.model.num_layers;
  const auto& types = args.cp_comm_type;
  if (types.empty() || (types.size() != 1 && static_cast<int>(types.size()) != L))
    throw Error("--cp-comm-type: " + std::to_string(types.size()) +
                " values; expected one, or one per layer (" + std::to_string(L) + ")");
  const bool hierarchical = std::find(types.begin(), types.end(), "a2a+p2p") != types.end();
  const auto& sizes = args.hierarchical_cp_sizes;
  if (!sizes.empty() && !hierarchical)
    throw Error("--hierarchical-context-parallel-sizes is for --cp-comm-type a2a+p2p");
  if (hierarchical && N > 1) {
    int64_t product = 1;
    for (int s : sizes) product *= s;
    if (sizes.size() != 2 || product != N)
      throw Error(
          "--hierarchical-context-parallel-sizes: expected two sizes (all-to-all, ring) "
          "whose product is --context-parallel-size " +
          std::to_string(N));
  }
  if (N == 1) return;
  const int64_t T = args.model.seq_length, TP = args.tensor_model_parallel_size;
  if (T % (2 * N) != 0)
    throw Error("--seq-length " + std::to_string(T) + " is not divisible by 2 x " +
                "--context-parallel-size = " + std::to_string(2 * N) +
                " (each sequence is cut into 2N chunks, rank r holding chunks r and 2N-1-r)");
  if (args.sequence_parallel && (T / N) % TP != 0)
    throw Error("--seq-length " + std::to_string(T) + " / --context-parallel-size " +
                std::to_string(N) + " = " + std::to_string(T / N) +
                " tokens per rank do not split over --tensor-model-parallel-size " +
                std::to_string(TP) + " with --sequence-parallel");
  if (args.model.moe.num_experts > 0 && args.model.moe.capacity_factor > 0)
    throw Error("--context-parallel-size " + std::to_string(N) +
                " with --moe-expert-capacity-factor: the capacity ranks tokens across the whole "
                "micro-batch, which context parallelism splits; drop the capacity (dropless MoE "
                "trains under CP)");
  // The all-to-all splits this rank's query heads (and key/value groups, or N by them) over its
  // group: the CP group (a2a) or the first hierarchical size (a2a+p2p).
  const int NH = args.model.num_attention_heads / static_cast<int>(TP);
  const int KV_all = args.model.kv_heads();
  const int KV = KV_all % TP == 0 ? KV_all / static_cast<int>(TP) : 1;
  for (const std::string& t : {std::string("a2a"), std::string("a2a+p2p")}) {
    if (std::find(types.begin(), types.end(), t) == types.end()) continue;
    const int A = t == "a2a" ? N : sizes[0];
    const std::string group = t == "a2a"
                                  ? "--context-parallel-size " + std::to_string(N)
                                  : "--hierarchical-context-parallel-sizes[0] " + std::to_string(A);
    if (NH % A != 0)
      throw Error("--cp-comm-type " + t + ": --num-attention-heads " +
                  std::to_string(args.model.num_attention_heads) +
                  " / --tensor-model-parallel-size " + std::to_string(TP) + " = " +
                  std::to_string(NH) + " heads per rank are not divisible by " + group);
    if (KV % A != 0 && A % KV != 0)
      throw Error("--cp-comm-type " + t + ": " + std::to_string(KV) +
                  " key/value groups per tensor-parallel rank (--num-query-groups " +
                  std::to_string(KV_all) + ") neither split over nor divide " + group);
  }
}

}  // namespace tessera::train
