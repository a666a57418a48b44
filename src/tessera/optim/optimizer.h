// The optimizer over a model's flat parameter buffers: fp32 master weights, AdamW moments or
// SGD momentum, one fused pass per parameter (weight decay applies to parameters marked for it:
// not to biases or norm weights).
//
// Mixed precision: with bf16 compute the master weights are a separate fp32 copy and each step
// writes the rounded bf16 values back into the model's buffer. With fp32 compute the model's
// buffer *is* the master copy (no duplicate), unless OptimizerOptions::separate_master asks for
// a copy anyway: then the optimizer only writes the model's buffer (an exact fp32 copy of the
// master), never reads it, and everything that reads master weights (checkpoints, export, the
// parameter norm) reads the optimizer's own copy. Parameter offload needs this: the buffer's
// owned parts come and go between uses (offload/param_swap.h).
//
// Sharded (ZeRO stage 1, the distributed optimizer): the optimizer owns only some ranges of the
// flat buffers; master weights and moments exist for those elements only (packed in range
// order), and a step updates only their values. The data-parallel layer gathers the rest.
//
// The fp32 state (separate master weights, moments) lives in a StateStorage (state_storage.h):
// in memory by default, or on NVMe (offload/nvme_state_storage.h), where a step visits it one
// sub-group at a time. Every element's update is the same whatever the storage and however the
// runs are cut into windows (the kernels are elementwise), so offloaded runs equal in-memory
// runs bitwise.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/model/parameter.h"
#include "tessera/optim/state_storage.h"

namespace tessera::optim {

struct OptimizerOptions {
  std::string kind = "adam";  // "adam" (AdamW) or "sgd"
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0.9;
  double weight_decay = 0.01;
  // Keep the fp32 master weights apart from the model's buffer even with fp32 compute (always
  // apart with bf16/fp16). Bitwise the same training either way: the initial master is the
  // exact fp32 initial values, and a step writes the master it computed into the buffer.
  bool separate_master = false;
};

class Optimizer {
 public:
  // Ranges [begin, end) of flat-buffer elements this optimizer owns, increasing and disjoint;
  // empty = the whole buffer.
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  // `storage`: where the fp32 state lives (nullptr: in memory). It is initialised here.
  Optimizer(model::ParameterSet& params, const OptimizerOptions& options, Ranges owned = {},
            std::unique_ptr<StateStorage> storage = nullptr);

  // One update with learning rate `lr` of the owned elements; the gradients used are
  // flat_grads * grad_scale (grad_scale folds in 1/loss_scale and the clipping coefficient).
  // `decoupled_lr` >= 0 is the learning rate of the parameters marked embedding_or_output
  // (Megatron's --decoupled-lr); negative: they take `lr` too.
  // `updated_through(e)`, when given, is called as the step goes (runs are updated in flat
  // order): every owned element below flat element e has its new value, master and compute
  // (ZeRO 3's parameter offload writes those parts out then, instead of holding the whole shard
  // until the step ends).
  void step(double lr, float grad_scale, double decoupled_lr = -1,
            const std::function<void(int64_t)>& updated_through = {});
  int64_t steps() const { return steps_; }
  // Adam's betas from the next step on (a schedule that cycles momentum: DeepSpeed's OneCycle).
  // The bias corrections use the betas of the step, as torch.optim.AdamW's do. Adam only.
  void set_betas(double beta1, double beta2);
  const std::string& kind() const { return options_.kind; }  // "adam" or "sgd"

  // The fp32 master value of a parameter (a copy; for export). Unsharded optimizers only.
  Tensor master(const model::Parameter& p) const;
  // The fp32 master values of the owned elements, packed in range order (a copy).
  Tensor owned_master() const;
  bool sharded() const { return sharded_; }
  // The sum of squares (in double) of the fp32 master values of the owned elements inside
  // `within` (flat ranges, increasing and disjoint): this rank's part of the parameter norm.
  double master_sum_squares(const Ranges& within) const;

  // Checkpointing. One owned run of one parameter: flat-buffer elements [begin, end) and where
  // their fp32 state is, indexed like the run (master[0] is element `begin`): the master
  // weights (the model's buffer itself with fp32 compute unless separate_master) and one array
  // per entry of state_names().
  struct StateRun {
    const model::Parameter* param;
    int64_t begin, end;
    float* master;
    std::vector<float*> state;
    int64_t packed;  // the packed index of element `begin` among the owned elements
    int64_t window;  // the storage window it came in (0, 1, ...): one window is resident at once
    // A kStep visit of a storage that holds the gradients: element `begin`'s gradient there
    // (else null: the gradients are the model's flat buffer).
    const float* grad = nullptr;
  };
  // Calls fn for every owned run, in flat order, with its state resident for the call only. With
  // the state in memory each run comes whole (one window); on NVMe a run may come in several
  // consecutive pieces (cut at sub-group boundaries, one window each). kRead: fn must not change
  // the state.
  void visit_state_runs(StateAccess access, const std::function<void(const StateRun&)>& fn);
  // The owned runs, whole (flat [begin, end) of `param`), without their state.
  struct OwnedRun {
    const model::Parameter* param;
    int64_t begin, end;
  };
  const std::vector<OwnedRun>& owned_runs() const { return runs_; }
  const StateStorage& storage() const { return *storage_; }
  // The per-element state's names, as PyTorch's optimizers call them: {"exp_avg", "exp_avg_sq"}
  // for AdamW, {"momentum_buffer"} for SGD.
  std::vector<std::string> state_names() const;
  // A loaded step count (the bias corrections and the learning-rate schedule follow it).
  void set_steps(int64_t steps) { steps_ = steps; }
  // After the master weights were overwritten (a checkpoint load): the owned elements' compute
  // values become their rounding, as after a step.
  void refresh_compute_values();

 private:
  // Calls fn(run) for the resident pieces of the owned runs, window by window (StateRun above).
  void visit_pieces(StateAccess access, const std::function<void(const StateRun&)>& fn) const;

  model::ParameterSet& params_;
  OptimizerOptions options_;
  Ranges owned_;
  bool sharded_;
  bool separate_master_;
  int64_t owned_numel_ = 0;
  std::vector<OwnedRun> runs_;             // in flat order
  std::vector<int64_t> run_packed_;        // packed index of each run's first element
  std::unique_ptr<StateStorage> storage_;  // [master if separate_master_], exp_avg, [exp_avg_sq]
  int64_t steps_ = 0;
};

}  // namespace tessera::optim
