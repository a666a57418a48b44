// The memory report (Megatron's report_theoretical_memory and report_memory, printed with the
// first log line): per category, what one rank should hold by the layout's arithmetic beside what
// it holds, for the rank with the largest measured total.
//
// Theory, from the model configuration and the layout alone (never from Tessera's buffers):
//   parameters   P x bytes of the compute dtype, P this rank's elements: its layers' and (first
//                stage) embeddings' and (last stage) final norm's and output layer's, the
//                tensor-parallel matrices and vocabulary divided by TP, an MoE layer's experts by
//                EP (and by the expert TP size); ZeRO 3 keeps 1/DP of each unit at or above the
//                persistence threshold (experts' units 1/expert-DP) and the smaller ones whole
//   gradients    4 P (fp32), ZeRO 2-3: 4 P / DP (experts / expert-DP); none with the optimizer
//                state on NVMe (they follow it at the accumulation boundary)
//   optimizer    per owned element, fp32 master weights unless the compute dtype is fp32 (then
//                the parameters are the master copy) plus AdamW's two moments (SGD's one);
//                ZeRO 1-3 own 1/DP (experts 1/expert-DP)
//   other        the kernels' scratch of the rank's step (model/scratch_memory.h): every
//                product's and norm backward's buffers at their largest over the rank's layers
//                and head (oneDNN's scratchpad asked of the primitive, the blocked GEMM's packing,
//                widened copies) plus the largest temporary (norm partial sums); per CPU target
//                and GEMM path, as the kernels size them. With several threads the blocked GEMM's
//                per-thread buffers are a bound (kernels/gemm.h plan_gemm); an MoE layer's
//                experts are planned at balanced rows (exact when padded to capacity)
// Measured: parameters and gradients as the resident bytes of the flat buffers (ZeRO gives the
// pages of unowned parts back to the system, which allocation counts would not show), the
// optimizer state by the memory accountant, after the first step; activations, communication
// buffers and other (kernel scratch) as the accountant's peak of that iteration, and the
// process's peak resident set.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/context/context_parallel.h"
#include "tessera/core/dtype.h"
#include "tessera/model/chunk_runner.h"
#include "tessera/model/config.h"
#include "tessera/pipeline/schedule.h"

namespace tessera::train {

// What the theory needs to know about one rank's place in the layout.
struct RankLayout {
  int tp = 1, dp = 1, ep = 1, expert_tp = 1, expert_dp = 1;
  bool experts_whole = false;                  // --expert-tensor-parallel-size 1 under TP
  bool first_stage = true, last_stage = true;  // holds the embeddings / the head
  std::vector<int> layers;                     // the global indices of this rank's layers
  int zero_stage = 0;
  int64_t persistence_threshold = 100'000;  // ZeRO 3
  DType compute = DType::kF32;
  bool sgd = false;
  // Optimizer state on NVMe (offload/nvme_state_storage.h): the bytes of its buffers, which are
  // all of it that is in memory; negative: the state is in memory.
  double optimizer_offload_buffer_bytes = -1;
  // ... and how its swapper runs (offload::NvmeStateOptions; the step-time model's I/O): fp32
  // arrays per owned element, sub-group size (elements), buffers, pipelined reads and writes.
  int optimizer_offload_arrays = 0;
  int64_t optimizer_offload_sub_group = 0;
  int optimizer_offload_buffers = 0;
  bool optimizer_offload_pipeline_read = false, optimizer_offload_pipeline_write = false;
  // Parameters on NVMe (ZeRO 3, offload/param_swap.h): the elements of sharded units' parts kept
  // in memory anyway (max_in_cpu); the other parts are on disk between uses, and the fp32 master
  // weights are a copy of their own whatever the compute dtype. Negative: no parameter offload.
  double param_offload_kept_elements = -1;
  // ... and the bytes of its buffers (the parameters' category of the accountant, outside the
  // flat buffer the report's parameter row measures).
  double param_offload_buffer_bytes = 0;
  // ... and how its reads run (offload::ParamSwapOptions; the step-time model's I/O): which of
  // zero3_part_elements' parts max_in_cpu keeps in memory, the buffers and their elements.
  std::vector<bool> param_offload_kept_parts;
  int param_offload_buffers = 0;
  int64_t param_offload_buffer_elements = 0;
  // Activations: the pipeline (stage pp_rank of pp, `chunks` model chunks, each chunk's global
  // layers in `chunk_layers`), micro-batches per iteration and tokens per micro-batch.
  int pp = 1, pp_rank = 0;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  std::vector<std::vector<int>> chunk_layers;
  // Tokens: of a micro-batch on this rank (its share of every sequence under CP).
  int64_t micro_batches = 1, tokens = 0, micro_batch_size = 1;
  bool sequence_parallel = false;
  // Context parallelism: the group's size, each global layer's communication type (empty
  // without CP) and, for a2a+p2p, the size of an all-to-all group.
  int cp = 1, cp_a2a = 1;
  std::vector<context::CommType> cp_types;
  model::RecomputePolicy recompute;
  int threads = 1;  // the OpenMP team the kernels run on
  // ZeRO's gradient buckets (ShardingPlan): reduced while backward runs when overlapped, each
  // about bucket_elements elements of whole units merged from the end (ZeRO 3: one per unit).
  int64_t bucket_elements = 40'000'000;
  int64_t prefetch_elements = 50'000'000;  // ZeRO 3's units gathered ahead
  int64_t max_live_elements = 1'000'000'000;  // ZeRO 3's units whole at once, at most
  bool overlap_grad_reduce = true;
  DType grad_reduce_dtype = DType::kF32;  // the buckets' reductions send and sum in it
  bool tp_reduce_in_16_bit = false;       // 16-bit activations' TP sums in their own type
};

struct ModelStateBytes {
  double parameter_elements = 0;  // P
  double expert_elements = 0;     // the experts' part of P (reduced over the expert-DP group)
  double parameters = 0, gradients = 0, optimizer = 0;
};

ModelStateBytes theoretical_model_states(const model::ModelConfig& cfg, const RankLayout& r);
// The elements whose fp32 optimizer state this rank holds: its share of every parameter from
// ZeRO stage 1 on (dense ones over DP, experts over the expert-data-parallel group), else all.
double optimizer_owned_elements(const model::ModelConfig& cfg, const RankLayout& r);
// ZeRO 3: the elements of this rank's part of each unit, in flat order as ParameterSet lays the
// units out (units padded to a multiple of lcm(DP, expert DP)); 0 for a unit kept whole (below
// the persistence threshold). What parameter offload swaps (offload/param_swap.h).
std::vector<int64_t> zero3_part_elements(const model::ModelConfig& cfg, const RankLayout& r);

// The activations' peak of an iteration: the layers' kept activations of the micro-batches in
// flight when the first backward starts (without a pipeline one micro-batch; GPipe all M; 1F1B
// stage s: min(P - s, M); interleaved: Megatron's warm-up count + 1 model-chunk micro-batches),
// recomputation's kept inputs and the group being recomputed, the pipeline's receive buffers
// posted by then (the schedule's steps up to that backward, pipeline/schedule.h; sends are taken
// as completed), plus the larger of a layer backward's and the output layer's working set
// (model/activation_memory.h). An MoE layer's rows are the balanced routing's (exact with
// --moe-pad-expert-input-to-capacity; dropless, the busiest rank's and expert's excess over the
// mean shows as measured above theory). Under context parallelism the layers' tokens are this
// rank's; a layer whose core runs in a head split (a2a, a2a+p2p) keeps its q, k, v there and its
// core's output in both splits.
double theoretical_activations(const model::ModelConfig& cfg, const RankLayout& r);
// Of that peak, only what the layers keep for the micro-batches in flight when the first backward
// starts (recomputation's kept inputs, not the group it reruns; no transfer buffers, no working
// set): the quantity Korthikanti et al. 2022's per-layer formulas count (its Table 2).
double theoretical_kept_activations(const model::ModelConfig& cfg, const RankLayout& r);

// The communication buffers' peak: ZeRO 1-3's reduce-scattered gradient parts (4 P / DP, an
// expert unit's over expert-DP; held until the step) plus the larger of a tensor-parallel
// collective's staging (16-bit activations are reduced in fp32 copies: 4 N C for an all-reduce, 4 N
// C (1 + 1/TP) for a sequence-parallel reduce-scatter, none with tp_reduce_in_16_bit; with several
// samples a micro-batch, the
// sequence-parallel permutation's copy) and, under sequence parallelism, the fp32 sum of the
// replicated parameters' gradients (norms, row-parallel biases, position embedding) and an MoE
// layer's exchange buffers (the router logits' broadcast under TP without SP; the all-gather
// dispatcher's padded and gathered rows). ZeRO's parts are counted all in flight at once: under
// ZeRO 2-3 with overlapped reduction a bucket reduced before the next is launched gives its buffer
// back, so the measured peak can lie below this bound (down to the largest bucket's part).
// Context parallelism adds its largest layer's exchange: p2p the key/value block in hand and the
// one arriving, and in backward their fp32 gradient accumulators; all_gather every rank's blocks
// and (backward) their fp32 accumulators; a2a the all-to-all's send and receive copies of q, k,
// v; a2a+p2p the larger of its group's all-to-all and its ring.
// ZeRO 0 overlapped, the word embedding's rows reduced after backward (distributed/
// data_parallel_grads.h) are in this category too: when it applies, its peak is the larger of the
// above and those rows' buffers.
double theoretical_comm_buffers(const model::ModelConfig& cfg, const RankLayout& r);
// The part of theoretical_comm_buffers held during backward (everything but the embedding's rows).
double theoretical_backward_comm_buffers(const model::ModelConfig& cfg, const RankLayout& r);

// Whether this rank's reduction takes the word embedding by rows (distributed::embedding_by_rows
// for a rank whose part is one chunk holding the embeddings), and how many rows it moves at most:
// this rank's (a micro-batch's tokens, at most its vocabulary rows) and their union over the
// gradient ranks. All zero where it does not apply.
struct EmbeddingRowsTheory {
  bool applies = false;
  double vocab_rows = 0, mine = 0, all = 0;
};
EmbeddingRowsTheory embedding_rows_theory(const model::ModelConfig& cfg, const RankLayout& r);
// The buffers that takes at the end of backward: this rank's rows and the union's, both C fp32
// elements a row, and the row indices exchanged.
double theoretical_embedding_rows_buffers(const model::ModelConfig& cfg, const RankLayout& r);

// The 16-bit copies a gradient bucket's reduction goes through while it runs, with
// --grad-reduce-in-bf16 or a 16-bit communication_data_type (comm::
// sixteen_bit_reduction_scratch_bytes of the largest bucket, or of the embedding rows' sum); 0
// when gradients are reduced in fp32 or there is no data parallelism.
double theoretical_reduction_scratch(const model::ModelConfig& cfg, const RankLayout& r);

// The ZeRO 1-3 part of theoretical_comm_buffers alone: every unit's reduce-scattered gradient
// part, 4 x elements / sharers, which fills up as backward reduces buckets and is held until the
// optimizer step (0 without a sharded optimizer).
double theoretical_zero_buffers(const model::ModelConfig& cfg, const RankLayout& r);

// The largest sum of kept activations and ZeRO's gradient parts during the last micro-batch's
// backward: with overlapped reduction a bucket's part is allocated when backward completes its
// units (head first, then the layers from the last, then the embeddings) while the layers not yet
// reached still keep their activations, so with small buckets (ZeRO 3's per unit) the two
// overlap. Starts from theoretical_activations (one micro-batch's kept layers and the working
// set) and frees each layer's kept bytes as its backward ends. Without a sharded optimizer or
// overlap: theoretical_activations.
double theoretical_backward_peak(const model::ModelConfig& cfg, const RankLayout& r);

// ZeRO 3 when backward starts (all 0 below ZeRO 3). Each sharded unit that backward will use (but
// the one forward used last, still whole) is gathered ahead up to the prefetch budget.
struct Zero3BackwardStart {
  // The gathers in flight: each sends a copy of the rank's owned part (compute dtype) until the
  // unit is used; bytes.
  double sends = 0;
  // The unowned parameter parts whole then, in bytes: the units in use and those gathered ahead
  // (their pages resident; the other unowned parts' pages are given back). With the parameters on
  // NVMe, those units' owned parts too (read back into the flat buffer).
  double whole_unowned = 0;
  // The unowned gradient parts whose pages are not resident then, in fp32 bytes: every unit's but
  // the head's (given back when the iteration starts; backward writes the head's gradient first).
  double unwritten_unowned_grads = 0;
};
Zero3BackwardStart theoretical_zero3_backward_start(const model::ModelConfig& cfg,
                                                    const RankLayout& r);

// tessera::Error, worded as the trainer's (distributed/zero3_params.h), when ZeRO 3's
// --stage3-max-live-parameters is below what a step needs whole at once on this rank: its
// persistent units and the largest other one.
void check_zero3_live_limit(const model::ModelConfig& cfg, const RankLayout& r);

// Elements of the rank's flat parameter buffer as GPTModel allocates it: each unit padded to a
// multiple of lcm(DP, expert DP), ZeRO 3's unowned parts included (they are allocated, and only
// their pages are given back). The memory accountant counts the values and fp32 gradients at this
// size.
double allocated_parameter_elements(const model::ModelConfig& cfg, const RankLayout& r);

// The kernels' scratch of the rank's step (MemoryCategory::kOther), as described above: planned
// for the CPU target and GEMM path this process runs.
double theoretical_other(const model::ModelConfig& cfg, const RankLayout& r);

// The categories of the report, in print order.
inline constexpr int kReportCategories = 6;
inline constexpr const char* kReportCategoryNames[kReportCategories] = {
    "parameters", "gradients", "optimizer state", "activations", "communication buffers", "other"};

// One rank's figures: theory (negative: not predicted) and measured bytes per category, and the
// process's peak resident set.
struct RankMemory {
  std::array<double, kReportCategories> theory{}, measured{};
  double peak_rss = 0;
  double accountant_peak = 0;  // the memory accountant's total peak (peak_mem_bytes)
  double measured_total() const;
};

// The report's lines for `worst` (world rank `rank` of `world`).
std::string format_memory_report(const RankMemory& worst, int rank, int world);

}  // namespace tessera::train
