// NumericsDump: tessera-train's --dump-numerics DIR. For every training micro-batch it records
// the embedding's and every layer's output (forward), the gradient the head hands back and every
// layer's input gradient (backward), and after each step every parameter's gradient: the sum of
// squares, the largest magnitude, the sum, the element count and a checksum of the bits.
//
// Each rank writes DIR/numerics.rank<R>.jsonl (a header line with the layout, then one JSON
// object per record, the format in docs/observability.md) holding its part of each tensor:
//  - residual-stream rows: a rank writes the rows it holds, except that ranks holding the same
//    rows (tensor-parallel ranks without --sequence-parallel) leave them to TP rank 0, so the
//    parts of every (iteration, micro-batch, tensor) over all files are the whole tensor once;
//    micro-batches are named by their first global sample, the same under any DP size;
//  - parameter gradients: the flat ranges the caller gives (each global element on one rank).
// numerics/numerics_diff.h merges the parts (sums add, maxima take the larger; the checksums,
// XXH3 of each part's bytes, add modulo 2^64, so they compare only runs of the same layout) and
// finds where two runs part. Nothing is communicated: every figure is merged offline.
//
// Test hook: with `fault_layer` >= 0, the rank holding that layer at TP rank 0 and CP rank 0 adds
// one ulp to the first element of that layer's input gradient in the run's first micro-batch
// (its first sample is global sample 0: one data-parallel rank), before recording it.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tessera/model/activation_probe.h"
#include "tessera/model/parameter.h"

namespace tessera::numerics {

struct NumericsDumpOptions {
  std::string dir;
  int world_rank = 0, world_size = 1;
  // This rank writes residual-stream rows: false for TP ranks other than 0 without sequence
  // parallelism (their rows are TP rank 0's).
  bool writes_rows = true;
  std::string layout;    // e.g. "tp2.pp1.cp1.dp1.ep1.sp0.mbs1.zero0.bf16"
  int fault_layer = -1;        // test hook (see above)
  bool plants_fault = false;   // this rank plants it: TP rank 0 and CP rank 0
  int num_layers = 0;    // the model's: backward_input_grad's layer for the head's gradient
};

class NumericsDump : public model::ActivationProbe {
 public:
  // Creates DIR (if missing) and the rank's file. Throws tessera::Error when it cannot.
  explicit NumericsDump(NumericsDumpOptions options);

  void begin_iteration(int64_t iteration) { iteration_ = iteration; }
  void forward_output(int layer, const Tensor& x, const model::StepContext& ctx) override;
  void backward_input_grad(int layer, Tensor& dx, const model::StepContext& ctx) override;
  // After the step: each parameter's gradient restricted to `ranges` (flat [begin, end),
  // increasing), skipped where the ranges hold none of it.
  void parameter_grads(model::ParameterSet& params,
                       const std::vector<std::pair<int64_t, int64_t>>& ranges);
  // Flushes the iteration's records.
  void end_iteration();
  // Seconds spent recording so far (for the overhead report).
  double seconds() const { return seconds_; }

 private:
  void record(const char* pass, int64_t micro_batch, int layer, const std::string& tensor,
              const void* data, DType dtype, int64_t count);

  NumericsDumpOptions options_;
  std::ofstream file_;
  int64_t iteration_ = 0;
  bool fault_planted_ = false;
  double seconds_ = 0;
};

}  // namespace tessera::numerics
