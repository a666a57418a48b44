#include "tessera/train/memory_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "tessera/comm/process_group.h"
#include "tessera/distributed/data_parallel_grads.h"
#include "tessera/distributed/zero3_params.h"
#include "tessera/kernels/scratch_plan.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/scratch_memory.h"
#include "tessera/model/shard.h"

namespace tessera::train {
namespace {

double norm_elements(const model::ModelConfig& c) {
  return c.normalization == model::Normalization::kLayerNorm ? 2.0 * c.hidden_size
                                                             : 1.0 * c.hidden_size;
}

// The rank's units (ZeRO 3's granularity) with their elements and whether they are experts', as
// GPTModel forms them: the embeddings, each layer, a layer's experts when they are split apart
// (EP > 1 or experts whole under TP), the head; a tied embedding split over a pipeline (first and
// last stage on different ranks) makes the word embedding and its copy units of their own.
struct Unit {
  enum class Role { kEmbedding, kLayer, kHead };
  double elements;
  bool experts;
  Role role = Role::kLayer;
  int layer = -1;  // the global layer of a layer's unit (its dense part or its experts)
};

std::vector<Unit> rank_units(const model::ModelConfig& c, const RankLayout& r) {
  const double C = c.hidden_size;
  const double vocab_local = static_cast<double>(c.padded_vocab_size(r.tp)) / r.tp;
  const bool split_tied = !c.untie_embeddings_and_output_weights && r.first_stage != r.last_stage;
  std::vector<Unit> units;
  if (r.first_stage) {
    const double positions = c.position_embedding == model::PositionEmbedding::kLearnedAbsolute
                                 ? static_cast<double>(c.max_positions()) * C
                                 : 0.0;
    const Unit::Role e = Unit::Role::kEmbedding;
    if (split_tied) {
      units.push_back({vocab_local * C, false, e});
      if (positions > 0) units.push_back({positions, false, e});
    } else {
      units.push_back({vocab_local * C + positions, false, e});
    }
  }
  for (int l : r.layers) {
    double dense = c.attention_parameters(r.tp) + 2 * norm_elements(c);
    if (!c.is_moe_layer(l)) {
      units.push_back({dense + c.mlp_parameters(c.ffn(), r.tp), false, Unit::Role::kLayer, l});
      continue;
    }
    dense += C * c.moe.num_experts;  // the router, whole on every rank
    if (c.moe.shared_expert_size > 0) dense += c.mlp_parameters(c.moe.shared_expert_size, r.tp);
    const double experts =
        static_cast<double>(c.moe.num_experts / r.ep) * c.mlp_parameters(c.moe_ffn(), r.expert_tp);
    if (r.ep > 1 || r.experts_whole) {
      units.push_back({dense, false, Unit::Role::kLayer, l});
      units.push_back({experts, true, Unit::Role::kLayer, l});
    } else {  // one unit, reduced and sharded over data parallelism like the rest
      units.push_back({dense + experts, false, Unit::Role::kLayer, l});
    }
  }
  if (r.last_stage) {
    const double head =
        norm_elements(c) + (c.untie_embeddings_and_output_weights ? vocab_local * C : 0);
    units.push_back({head, false, Unit::Role::kHead});
    // The copy of the embedding, read by the output layer.
    if (split_tied) units.push_back({vocab_local * C, false, Unit::Role::kHead});
  }
  return units;
}

// The ranks a unit's parameters, gradients and optimizer state are sharded over: the
// data-parallel group, or the expert-data-parallel one for an expert's unit.
int unit_sharers(const Unit& u, const RankLayout& r) { return u.experts ? r.expert_dp : r.dp; }

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", bytes / (1 << 20));
  return buf;
}

// Elements of one residual-stream tensor of a micro-batch on this rank (rows x C).
double residual_elements(const model::ModelConfig& c, const RankLayout& r) {
  const double rows = r.sequence_parallel ? static_cast<double>(r.tokens) / r.tp : r.tokens;
  return rows * c.hidden_size;
}

// The balanced rows of an MoE layer on this rank (model/activation_memory.h).
model::MoeRows moe_rows(const model::ModelConfig& c, const RankLayout& r) {
  return model::balanced_moe_rows(c, r.tokens, r.ep, r.expert_tp, r.experts_whole ? r.tp : 1);
}

// The ranks over which layer l's attention core runs in a head split (1: none).
int head_split(const RankLayout& r, int layer) {
  if (r.cp_types.empty()) return 1;
  const context::CommType t = r.cp_types.at(layer);
  return t == context::CommType::kA2A ? r.cp : t == context::CommType::kA2AP2P ? r.cp_a2a : 1;
}

// Whether layer l's core takes the key/value blocks of p2p or all_gather.
bool cp_blocks(const RankLayout& r, int layer) {
  if (r.cp_types.empty()) return false;
  const context::CommType t = r.cp_types.at(layer);
  return t == context::CommType::kP2P || t == context::CommType::kAllGather;
}

// The largest context-parallel exchange of a layer (theoretical_comm_buffers).
double context_parallel_buffers(const model::ModelConfig& c, const RankLayout& r) {
  const double R = static_cast<double>(r.tokens), elem = dtype_size(r.compute);
  const double HD = c.head_dim(), NH = c.num_attention_heads / static_cast<double>(r.tp);
  const int kv = model::units_per_rank(c.kv_heads(), r.tp);
  // The ring: the block in hand and the one arriving, then their fp32 gradient accumulators.
  const auto ring = [&](double rows, double kv_cols) { return (2 * elem + 8) * rows * kv_cols; };
  // The all-to-all over A ranks: send and receive copies of q, k, v (groups replicated when A
  // does not divide them).
  const auto all_to_all = [&](int A) {
    return 2 * elem * R * (NH + 2 * A * model::units_per_rank(kv, A)) * HD;
  };
  double most = 0;
  for (context::CommType t : r.cp_types) {
    double bytes = 0;
    if (t == context::CommType::kP2P) bytes = ring(R, 2 * kv * HD);
    if (t == context::CommType::kAllGather)
      bytes = (elem * (1 + r.cp) + 4.0 * r.cp) * R * 2 * kv * HD;
    if (t == context::CommType::kA2A) bytes = all_to_all(r.cp);
    if (t == context::CommType::kA2AP2P) {
      const int A = r.cp_a2a;
      const double kv_cols = 2.0 * model::units_per_rank(kv, A) * HD;
      bytes = std::max(all_to_all(A), r.cp > A ? ring(A * R, kv_cols) : 0.0);
    }
    most = std::max(most, bytes);
  }
  return most;
}

}  // namespace

double optimizer_owned_elements(const model::ModelConfig& c, const RankLayout& r) {
  double dense = 0, experts = 0;
  for (const Unit& u : rank_units(c, r)) (u.experts ? experts : dense) += u.elements;
  return r.zero_stage >= 1 ? dense / r.dp + experts / r.expert_dp : dense + experts;
}

ModelStateBytes theoretical_model_states(const model::ModelConfig& c, const RankLayout& r) {
  ModelStateBytes out;
  double dense = 0, experts = 0, resident_params = 0;
  for (const Unit& u : rank_units(c, r)) {
    (u.experts ? experts : dense) += u.elements;
    const int sharers = unit_sharers(u, r);
    // ZeRO 3: a unit below the persistence threshold stays whole (DeepSpeed's rule).
    const bool sharded = r.zero_stage == 3 && u.elements >= r.persistence_threshold;
    // With parameter offload a sharded unit's part is on NVMe between uses.
    if (!sharded || r.param_offload_kept_elements < 0)
      resident_params += sharded ? u.elements / sharers : u.elements;
  }
  if (r.param_offload_kept_elements > 0) resident_params += r.param_offload_kept_elements;
  out.parameter_elements = dense + experts;
  out.expert_elements = experts;
  const double sharded_share = dense / r.dp + experts / r.expert_dp;
  out.parameters = resident_params * dtype_size(r.compute);
  out.gradients = 4.0 * (r.zero_stage >= 2 ? sharded_share : out.parameter_elements);
  // With the optimizer state on NVMe the owned gradients go there too, at the accumulation
  // boundary (distributed/gradient_offload.h): none are held after a step.
  if (r.optimizer_offload_buffer_bytes >= 0) out.gradients = 0;
  const double owned = optimizer_owned_elements(c, r);
  const bool separate_master = r.compute != DType::kF32 || r.param_offload_kept_elements >= 0;
  const double per_owned = (separate_master ? 4.0 : 0.0) + (r.sgd ? 4.0 : 8.0);
  out.optimizer = r.optimizer_offload_buffer_bytes >= 0 ? r.optimizer_offload_buffer_bytes
                                                       : owned * per_owned;
  return out;
}

namespace {

// theoretical_activations in its parts: the other micro-batches' kept layers, the one whose
// backward starts (its last recompute group rerun whole), the pipeline's transfer buffers and the
// largest working set.
struct ActivationParts {
  double others = 0, current = 0, buffers = 0, working = 0;
  double total() const { return others + current + buffers + working; }
};

// What the layers keep: the largest model chunk's bytes for one micro-batch (kept) and at its first
// backward (its last recompute group rerun whole), and the model-chunk micro-batches in flight
// when the first backward starts.
struct KeptLayers {
  double chunk_kept = 0, chunk_at_backward = 0;
  int64_t in_flight = 0;
};

KeptLayers kept_layers(const model::ModelConfig& c, const RankLayout& r) {
  using G = model::RecomputePolicy::Granularity;
  const int64_t N = r.tokens;
  const model::MoeRows moe = moe_rows(c, r);
  // A layer's bytes kept by a micro-batch under `granularity`.
  const auto layer = [&](int l, G granularity) {
    return model::layer_activation_bytes(c, N, r.compute, granularity, r.tp, r.sequence_parallel,
                                         c.is_moe_layer(l) ? &moe : nullptr, head_split(r, l));
  };
  const G kept = r.recompute.granularity == G::kSelective ? G::kSelective : G::kNone;
  // Per model chunk: what one micro-batch keeps, and at the chunk's first backward (the last
  // layer's recompute group rerun whole).
  const int V = static_cast<int>(r.chunk_layers.size());
  double chunk_kept = 0, chunk_at_backward = 0;
  for (const std::vector<int>& layers : r.chunk_layers) {
    const int n = static_cast<int>(layers.size());
    double k = 0, at_backward = 0;
    if (r.recompute.granularity != G::kFull) {
      for (int l : layers) k += layer(l, kept);
      at_backward = k;
    } else if (r.recompute.method == model::RecomputePolicy::Method::kBlock) {
      const int recomputed = std::min(n, r.recompute.num_layers);
      for (int i = 0; i < n; ++i) k += layer(layers[i], i < recomputed ? G::kFull : G::kNone);
      at_backward = k;
    } else {  // uniform groups of num_layers, each keeping its first layer's input
      const int g = r.recompute.num_layers;
      for (int i = 0; i < n; i += g) {
        const double input = layer(layers[i], G::kFull);
        k += input;
        if (i + g < n) {
          at_backward += input;
        } else {  // the last group, rerun whole at the chunk's first backward
          for (int j = i; j < n; ++j) at_backward += layer(layers[j], G::kNone);
        }
      }
    }
    chunk_kept = std::max(chunk_kept, k);
    chunk_at_backward = std::max(chunk_at_backward, at_backward);
  }
  // Model-chunk micro-batches in flight when the first backward starts (pipeline/schedule.cc's
  // warm-up counts, Megatron's).
  const int64_t P = r.pp, M = r.micro_batches, total = M * V, s = r.pp_rank;
  int64_t warmup = 0;
  if (P > 1 && r.schedule == pipeline::ScheduleKind::kGPipe) warmup = total;  // all forwards first
  if (P > 1 && r.schedule == pipeline::ScheduleKind::kOneFOneB) warmup = std::min(P - s - 1, M);
  if (P > 1 && r.schedule == pipeline::ScheduleKind::kInterleaved)
    warmup = M == P ? total : std::min(2 * (P - s - 1) + (V - 1) * P, total);
  return {chunk_kept, chunk_at_backward, std::min(warmup + 1, total)};
}

ActivationParts activation_parts(const model::ModelConfig& c, const RankLayout& r) {
  ActivationParts parts;
  const int64_t N = r.tokens;
  const model::MoeRows moe = moe_rows(c, r);
  const KeptLayers kept = kept_layers(c, r);
  parts.others = (kept.in_flight - 1) * kept.chunk_kept;
  parts.current = kept.chunk_at_backward;
  const int64_t P = r.pp, M = r.micro_batches;
  const int V = static_cast<int>(r.chunk_layers.size());
  // The pipeline's transfer buffers (residual rows each) when the first backward runs: the
  // receives posted and not yet consumed, besides the gradient that backward takes (counted in its
  // working set below), and the outputs sent so far, each held until its send completes (taken
  // as not yet: this is the bound the measured peak reaches when the next stage is slow to
  // receive).
  const double rows_bytes = dtype_size(r.compute) * residual_elements(c, r);
  if (P > 1) {
    const pipeline::ScheduleShape shape{r.pp, static_cast<int>(M), V};
    int buffers = 0;
    for (const pipeline::Step& st : pipeline::build_schedule(r.schedule, shape, r.pp_rank)) {
      const int j = pipeline::model_chunk(shape, r.pp_rank, st.chunk);
      const bool last_chunk = j == r.pp * V - 1;
      if (st.action == pipeline::Action::kRecvActivation ||
          st.action == pipeline::Action::kRecvGrad)
        ++buffers;
      if (st.action == pipeline::Action::kForward) {
        if (j > 0) --buffers;        // consumed its input
        if (!last_chunk) ++buffers;  // its output, until sent
      }
      if (st.action == pipeline::Action::kBackward) {
        if (!last_chunk) --buffers;  // its own gradient
        break;
      }
    }
    parts.buffers = buffers * rows_bytes;
  }
  // The larger working set: a layer's backward, or (last stage) the output layer's: its input,
  // the final norm's output, this rank's logits (their own gradient), the norm's input gradient
  // and the layer's (residual rows; the column-parallel input whole).
  const double elem = dtype_size(r.compute), C = c.hidden_size;
  const double rows = r.sequence_parallel ? static_cast<double>(N) / r.tp : N;
  // The largest layer's backward (an MoE layer's, when there is one).
  double working = 0;
  for (int l : r.layers)
    working = std::max(
        working, model::layer_backward_working_bytes(c, N, r.compute, r.tp, r.sequence_parallel,
                                                     c.is_moe_layer(l) ? &moe : nullptr,
                                                     head_split(r, l), cp_blocks(r, l)));
  if (r.last_stage) {
    const double logits = static_cast<double>(c.padded_vocab_size(r.tp)) / r.tp;
    working = std::max(working, elem * (3 * rows * C + N * C + N * logits));
  }
  parts.working = working;
  return parts;
}

}  // namespace

double theoretical_activations(const model::ModelConfig& c, const RankLayout& r) {
  if (r.chunk_layers.empty()) return -1;
  return activation_parts(c, r).total();
}

double theoretical_kept_activations(const model::ModelConfig& c, const RankLayout& r) {
  if (r.chunk_layers.empty()) return -1;
  const KeptLayers kept = kept_layers(c, r);
  return kept.in_flight * kept.chunk_kept;
}

double theoretical_zero_buffers(const model::ModelConfig& c, const RankLayout& r) {
  // Every unit's reduce-scattered gradient part (an expert unit's over expert-DP).
  double zero = 0;
  for (const Unit& u : rank_units(c, r)) {
    const int sharers = unit_sharers(u, r);
    if (r.zero_stage >= 1 && sharers > 1) zero += 4.0 * u.elements / sharers;
  }
  return zero;
}

namespace {

// Full recomputation's groups over one model chunk's layers (model/chunk_runner.h): layer i of
// the chunk is rerun with [first[i], last[i]] before the backward of the group's last layer;
// uniform groups of num_layers, block: each of the first num_layers layers alone. first[i] = -1:
// not recomputed (also every layer without full recomputation).
struct RecomputeGroups {
  std::vector<int> first, last;
};

RecomputeGroups recompute_groups(const RankLayout& r, int n) {
  using P = model::RecomputePolicy;
  RecomputeGroups g{std::vector<int>(n, -1), std::vector<int>(n, -1)};
  if (r.recompute.granularity != P::Granularity::kFull) return g;
  const bool uniform = r.recompute.method == P::Method::kUniform;
  const int size = uniform ? r.recompute.num_layers : 1;
  const int recomputed = uniform ? n : std::min(n, r.recompute.num_layers);
  for (int i = 0; i < recomputed; ++i) {
    g.first[i] = i / size * size;
    g.last[i] = std::min(g.first[i] + size, recomputed) - 1;
  }
  return g;
}

}  // namespace

double theoretical_backward_peak(const model::ModelConfig& c, const RankLayout& r) {
  using G = model::RecomputePolicy::Granularity;
  if (r.chunk_layers.empty()) return -1;
  const ActivationParts held = activation_parts(c, r);
  const double activations = held.total();
  // A reduction's 16-bit copies, while one runs (0 in fp32).
  const double scratch = theoretical_reduction_scratch(c, r);
  if (r.zero_stage < 1) {
    // ZeRO 0 reduces during backward when overlapped on one chunk and a bucket is final before
    // backward ends: the embedding's rows-first buckets, or any bucket but the last.
    const bool during =
        r.overlap_grad_reduce && r.chunk_layers.size() == 1 &&
        (embedding_rows_theory(c, r).applies ||
         allocated_parameter_elements(c, r) > static_cast<double>(r.bucket_elements));
    return activations + (during ? scratch : 0.0);
  }
  // ZeRO 2-3 under a pipeline complete the reduction after every micro-batch's backward (ZeRO 1
  // only after the last, in the cool-down), launching the buckets not yet launched all at once
  // while the stage's other micro-batches still keep their activations.
  const double at_finish =
      r.pp > 1 && r.zero_stage >= 2
          ? held.others + held.buffers + theoretical_zero_buffers(c, r) + scratch
          : 0.0;
  // Buckets reduced while backward runs: only with overlap, and only when a chunk's backward
  // reports its units (one chunk a rank: no virtual stages); ZeRO 1 reduces in the last
  // micro-batch alone, which under a pipeline runs after the others have let go.
  if (!r.overlap_grad_reduce || r.chunk_layers.size() > 1 || (r.pp > 1 && r.zero_stage == 1))
    return std::max(activations, at_finish);
  const model::MoeRows moe = moe_rows(c, r);
  const auto bytes_of = [&](int l, G granularity) {
    return model::layer_activation_bytes(c, r.tokens, r.compute, granularity, r.tp,
                                         r.sequence_parallel, c.is_moe_layer(l) ? &moe : nullptr,
                                         head_split(r, l));
  };
  // theoretical_activations already holds the last group's rerun.
  const std::vector<int>& chunk = r.chunk_layers.front();
  const int n = static_cast<int>(chunk.size());
  const RecomputeGroups groups = recompute_groups(r, n);
  const std::vector<int>&first = groups.first, &last = groups.last;
  const int last_group_begin = n > 0 ? first[n - 1] : -1;
  // What a layer's backward frees: everything it holds then (a recomputed layer its rerun
  // activations); and what reaching the last layer of an earlier group adds (its rerun, less the
  // input it kept).
  const G kept = r.recompute.granularity == G::kSelective ? G::kSelective : G::kNone;
  const auto index_of = [&](int layer) {
    return static_cast<int>(std::find(chunk.begin(), chunk.end(), layer) - chunk.begin());
  };
  const auto rerun = [&](int layer) {
    const int i = index_of(layer);
    if (i >= n || first[i] < 0 || last[i] != i || first[i] == last_group_begin) return 0.0;
    double added = -bytes_of(chunk[first[i]], G::kFull);
    for (int k = first[i]; k <= last[i]; ++k) added += bytes_of(chunk[k], G::kNone);
    return added;
  };
  const auto freed = [&](int layer) {
    const int i = index_of(layer);
    return bytes_of(layer, i < n && first[i] >= 0 ? G::kNone : kept);
  };
  const std::vector<Unit> units = rank_units(c, r);
  // Buckets as the reducer forms them: whole units merged from the end up to about
  // bucket_elements (ZeRO 3: each unit alone). A bucket is reduce-scattered once backward has
  // completed its last unit, before the next unit's backward frees anything.
  const double bucket = r.zero_stage == 3 ? 0.0 : static_cast<double>(r.bucket_elements);
  double total = activations, parts = 0, open_elements = 0, open_bytes = 0, most = activations;
  for (size_t i = units.size(); i-- > 0;) {
    const Unit& u = units[i];
    const int sharers = unit_sharers(u, r);
    if (open_elements > 0 && open_elements + u.elements > bucket) {
      parts += open_bytes;
      open_elements = open_bytes = 0;
      most = std::max(most, total + parts + scratch);
    }
    // A layer's activations go once its backward is done (with its dense unit, the first); an
    // earlier recompute group is rerun when backward reaches its last layer.
    if (u.role == Unit::Role::kLayer && (i + 1 == units.size() || units[i + 1].layer != u.layer)) {
      total += rerun(u.layer);
      most = std::max(most, total + parts);
    }
    if (u.role == Unit::Role::kLayer && (i == 0 || units[i - 1].layer != u.layer))
      total -= freed(u.layer);
    open_elements += u.elements;
    if (sharers > 1) open_bytes += 4.0 * u.elements / sharers;
  }
  // The last bucket is launched once backward is done (theoretical_zero_buffers).
  return std::max(most, at_finish);
}

namespace {

// A unit's elements in the flat buffers: padded to a multiple of lcm(DP, expert DP), so that it
// splits evenly over whichever group shards it.
double padded_unit_elements(const Unit& u, const RankLayout& r) {
  const double multiple = static_cast<double>(std::lcm(int64_t{r.dp}, int64_t{r.expert_dp}));
  return std::ceil(u.elements / multiple) * multiple;
}

// Zero3Params's rule (distributed::persistent_unit), on the unit's size in the flat buffers.
bool zero3_persistent(const Unit& u, const RankLayout& r) {
  return distributed::persistent_unit(static_cast<int64_t>(padded_unit_elements(u, r)),
                                      unit_sharers(u, r), r.persistence_threshold,
                                      r.param_offload_kept_elements >= 0);
}

}  // namespace

void check_zero3_live_limit(const model::ModelConfig& c, const RankLayout& r) {
  if (r.zero_stage != 3) return;
  double persistent = 0, largest = 0;
  for (const Unit& u : rank_units(c, r)) {
    if (zero3_persistent(u, r))
      persistent += padded_unit_elements(u, r);
    else
      largest = std::max(largest, padded_unit_elements(u, r));
  }
  distributed::require_live_limit(r.max_live_elements, static_cast<int64_t>(persistent),
                                  static_cast<int64_t>(largest));
}

Zero3BackwardStart theoretical_zero3_backward_start(const model::ModelConfig& c,
                                                    const RankLayout& r) {
  Zero3BackwardStart out;
  if (r.zero_stage != 3) return out;
  // Backward's pass (model/chunk_runner.cc): the head's units (the output layer's, with the word
  // embedding when it is tied on this stage), then each layer's from the last; the embeddings'
  // backward reads no parameters. Its first acquisition waits for its own gathers, then the units
  // after it are gathered ahead (distributed/zero3_params.h) up to the prefetch budget, each
  // sending a copy of this rank's owned part until the unit is used.
  const std::vector<Unit> units = rank_units(c, r);
  const bool tied_here = !c.untie_embeddings_and_output_weights && r.first_stage && r.last_stage;
  std::vector<std::vector<const Unit*>> pass;  // acquisitions, in order
  if (r.last_stage) {
    pass.emplace_back();
    for (const Unit& u : units)
      if (u.role == Unit::Role::kHead || (tied_here && u.role == Unit::Role::kEmbedding &&
                                          &u == &units.front()))
        pass.back().push_back(&u);
  }
  for (size_t i = units.size(); i-- > 0;) {
    if (units[i].role != Unit::Role::kLayer) continue;
    if (pass.empty() || pass.back().empty() || pass.back().front()->layer != units[i].layer ||
        pass.back().front()->role != Unit::Role::kLayer)
      pass.emplace_back();
    pass.back().push_back(&units[i]);
  }
  // Within a layer the units go in their own order (the dense unit before its experts'), as the
  // chunk runner acquires them.
  for (size_t a = r.last_stage ? 1 : 0; a < pass.size(); ++a)
    std::reverse(pass[a].begin(), pass[a].end());
  // Under full uniform recomputation the first backward reruns the last group's forward, which
  // acquires (and so waits for) its layers before the activations reach their peak: those
  // gathers are done by then.
  std::vector<int> rerun;
  if (r.recompute.method == model::RecomputePolicy::Method::kUniform && !r.chunk_layers.empty()) {
    const std::vector<int>& chunk = r.chunk_layers.back();
    const int n = static_cast<int>(chunk.size());
    const RecomputeGroups groups = recompute_groups(r, n);
    for (int i = 0; i < n; ++i)
      if (groups.first[i] >= 0 && groups.first[i] == groups.first[n - 1]) rerun.push_back(chunk[i]);
  }
  const auto rerun_before_peak = [&](const Unit* u) {
    return std::find(rerun.begin(), rerun.end(), u->layer) != rerun.end();
  };
  // stage3_max_live_parameters bounds every unit whole at once (Zero3Params::acquire): the
  // persistent ones, those in use when the gathers ahead are started — the head's at the first
  // acquisition, or under full recomputation the rerun group's, acquired after the head was
  // released — and those gathered ahead.
  const auto in_use = [&](const Unit& u) {
    if (!rerun.empty()) return u.role == Unit::Role::kLayer && rerun_before_peak(&u);
    return !pass.empty() && std::find(pass[0].begin(), pass[0].end(), &u) != pass[0].end();
  };
  const auto unowned_elements = [&](const Unit& u) {
    const double whole = padded_unit_elements(u, r);
    return whole - whole / unit_sharers(u, r);
  };
  // A unit whole on this rank holds its unowned part's pages too; with the parameters on NVMe its
  // owned part's as well (read back into the flat buffer, which the theory's parameters leave out
  // but for the parts max_in_cpu keeps: counted again here, on the safe side).
  const bool offloaded = r.param_offload_kept_elements >= 0;
  const auto unowned = [&](const Unit& u) {
    return dtype_size(r.compute) * (offloaded ? padded_unit_elements(u, r) : unowned_elements(u));
  };
  // Gradients: every iteration starts with the unowned parts' pages given back
  // (DataParallelGrads::start_iteration); backward writes the head's first, holding them until
  // its bucket is reduced, the others' as it reaches them.
  for (const Unit& u : units)
    if (pass.empty() || std::find(pass[0].begin(), pass[0].end(), &u) == pass[0].end())
      out.unwritten_unowned_grads += 4.0 * unowned_elements(u);
  double live = 0;
  for (const Unit& u : units)
    if (zero3_persistent(u, r) || in_use(u)) {
      live += padded_unit_elements(u, r);
      if (!zero3_persistent(u, r)) out.whole_unowned += unowned(u);
    }
  double elements = 0;
  for (size_t a = 1; a < pass.size(); ++a)
    for (const Unit* u : pass[a]) {
      if (rerun_before_peak(u) || zero3_persistent(*u, r)) continue;
      const double whole = padded_unit_elements(*u, r);
      if (elements + whole > r.prefetch_elements || live + whole > r.max_live_elements) return out;
      elements += whole;
      live += whole;
      const int sharers = unit_sharers(*u, r);
      if (sharers > 1) out.sends += dtype_size(r.compute) * u->elements / sharers;
      out.whole_unowned += unowned(*u);
    }
  return out;
}

std::vector<int64_t> zero3_part_elements(const model::ModelConfig& c, const RankLayout& r) {
  std::vector<int64_t> parts;
  for (const Unit& u : rank_units(c, r)) {
    const double padded = padded_unit_elements(u, r);
    const int sharers = unit_sharers(u, r);
    parts.push_back(u.elements < r.persistence_threshold
                        ? 0
                        : static_cast<int64_t>(std::llround(padded / sharers)));
  }
  return parts;
}

double allocated_parameter_elements(const model::ModelConfig& c, const RankLayout& r) {
  double elements = 0;
  for (const Unit& u : rank_units(c, r)) elements += padded_unit_elements(u, r);
  return elements;
}

EmbeddingRowsTheory embedding_rows_theory(const model::ModelConfig& c, const RankLayout& r) {
  if (!r.first_stage || r.chunk_layers.size() != 1 || r.optimizer_offload_buffer_bytes >= 0)
    return {};
  const int64_t vocab_rows = c.padded_vocab_size(r.tp) / r.tp;
  if (!distributed::embedding_by_rows(distributed::ShardingPlan::for_stage(
                                          r.zero_stage, r.bucket_elements, r.overlap_grad_reduce),
                                      r.dp,
                                      {{0, vocab_rows * c.hidden_size}, c.hidden_size, r.tokens}))
    return {};
  return {true, static_cast<double>(vocab_rows),
          static_cast<double>(std::min(vocab_rows, r.tokens)),
          static_cast<double>(distributed::embedding_rows_bound(vocab_rows, r.tokens, r.dp))};
}

double theoretical_reduction_scratch(const model::ModelConfig& c, const RankLayout& r) {
  if (r.grad_reduce_dtype == DType::kF32) return 0;
  const comm::OpType op =
      r.zero_stage == 0 ? comm::OpType::kAllReduce : comm::OpType::kReduceScatter;
  const auto scratch = [&](double elements, int sharers) {
    const int64_t n = static_cast<int64_t>(elements) / sharers * sharers;
    return static_cast<double>(comm::sixteen_bit_reduction_scratch_bytes(op, sharers, n));
  };
  // Buckets: ZeRO 3's one per unit; otherwise about bucket_elements of each group's elements.
  double most = 0, dense = 0, experts = 0;
  int dense_sharers = 1, expert_sharers = 1;
  for (const Unit& u : rank_units(c, r)) {
    const int sharers = unit_sharers(u, r);
    if (sharers < 2) continue;
    const double elements = padded_unit_elements(u, r);
    if (r.zero_stage == 3) most = std::max(most, scratch(elements, sharers));
    if (u.experts) {
      experts += elements;
      expert_sharers = sharers;
    } else {
      dense += elements;
      dense_sharers = sharers;
    }
  }
  const double bucket = static_cast<double>(r.bucket_elements);
  if (r.zero_stage < 3) {
    if (dense > 0) most = std::max(most, scratch(std::min(dense, bucket), dense_sharers));
    if (experts > 0) most = std::max(most, scratch(std::min(experts, bucket), expert_sharers));
  }
  // ZeRO 0's embedding rows: one all-reduce of the union's rows.
  const EmbeddingRowsTheory rows = embedding_rows_theory(c, r);
  if (rows.applies)
    most = std::max(
        most, static_cast<double>(comm::sixteen_bit_reduction_scratch_bytes(
                  comm::OpType::kAllReduce, r.dp, static_cast<int64_t>(rows.all) * c.hidden_size)));
  return most;
}

double theoretical_embedding_rows_buffers(const model::ModelConfig& c, const RankLayout& r) {
  const EmbeddingRowsTheory rows = embedding_rows_theory(c, r);
  // Rows of fp32 (this rank's and the union's); the count, every rank's count, this rank's
  // indices padded to the longest list and every rank's.
  return rows.applies ? 4.0 * (rows.mine + rows.all) * c.hidden_size + 8.0 * (1 + r.dp) +
                            4.0 * rows.mine * (1 + r.dp)
                      : 0.0;
}

double theoretical_comm_buffers(const model::ModelConfig& c, const RankLayout& r) {
  return std::max(theoretical_backward_comm_buffers(c, r),
                  theoretical_zero_buffers(c, r) + theoretical_embedding_rows_buffers(c, r) +
                      theoretical_reduction_scratch(c, r));
}

double theoretical_backward_comm_buffers(const model::ModelConfig& c, const RankLayout& r) {
  const double zero = theoretical_zero_buffers(c, r);
  const double N = static_cast<double>(r.tokens), C = c.hidden_size;
  const double elem = dtype_size(r.compute);
  // An MoE layer's: TP rank 0's router logits broadcast (TP without SP), and with the
  // all-gather dispatcher every rank's rows, padded to the longest, gathered (the padded copy
  // and the gathered block). The exchange's row counts are a few hundred bytes, like the
  // scalars' sums, and not counted.
  double moe = 0;
  if (c.moe.enabled()) {
    if (r.tp > 1 && !r.sequence_parallel) moe = 4 * N * c.moe.num_experts;
    if (r.ep > 1 && c.moe.dispatcher == moe::DispatcherType::kAllGather) {
      const model::MoeRows rows = moe_rows(c, r);
      moe = std::max(moe, elem * std::max(rows.permuted, rows.local) * C * (1 + r.ep));
    }
  }
  const double cp = r.cp > 1 ? context_parallel_buffers(c, r) : 0.0;
  if (r.tp == 1) return zero + std::max(moe, cp);
  // 16-bit activations summed in fp32 go through fp32 copies (the input, and under SP the output);
  // summed in their own type (--tp-reduce-in-16-bit) in place.
  const bool copies = r.compute != DType::kF32 && !r.tp_reduce_in_16_bit;
  double collective = copies ? 4 * N * C * (r.sequence_parallel ? 1.0 + 1.0 / r.tp : 1.0) : 0.0;
  if (r.sequence_parallel && r.micro_batch_size > 1) collective += elem * N * C;
  double replicated_sum = 0;
  if (r.sequence_parallel) {
    const double bias = c.add_bias_linear ? 2 * C : 0;  // attention and MLP output biases
    double replicated = r.layers.size() * (2 * norm_elements(c) + bias);
    if (r.first_stage && c.position_embedding == model::PositionEmbedding::kLearnedAbsolute)
      replicated += static_cast<double>(c.max_positions()) * C;
    if (r.last_stage) replicated += norm_elements(c);
    // Sharded optimizer: only the owned parts are summed.
    replicated_sum = 4 * replicated / (r.zero_stage >= 1 ? r.dp : 1);
  }
  return zero + std::max({collective, replicated_sum, moe, cp});
}

double theoretical_other(const model::ModelConfig& c, const RankLayout& r) {
  kernels::ScratchPlan plan;
  for (int l : r.layers) {
    const bool moe = c.is_moe_layer(l);
    const model::MoeRows rows = moe ? moe_rows(c, r) : model::MoeRows{};
    model::plan_layer_scratch(plan, c, r.tokens, r.compute, r.tp, r.sequence_parallel, r.threads,
                              moe ? &rows : nullptr);
  }
  if (r.last_stage)
    model::plan_head_scratch(plan, c, r.tokens, r.compute, r.tp, r.sequence_parallel, r.threads);
  return static_cast<double>(plan.peak_bytes());
}

double RankMemory::measured_total() const {
  double t = 0;
  for (double m : measured) t += m;
  return t;
}

std::string format_memory_report(const RankMemory& worst, int rank, int world) {
  std::string out = "> memory report, rank " + std::to_string(rank) + " of " +
                    std::to_string(world) +
                    " (the largest measured total), MiB: theory (the layout's arithmetic) | "
                    "measured (after the first step; activations, buffers, other: their peak)\n";
  for (int k = 0; k < kReportCategories; ++k) {
    char line[160];
    const double t = worst.theory[k], m = worst.measured[k];
    if (t > 0) {
      std::snprintf(line, sizeof line, ">   %-22s %10s | %10s | %+.1f%%\n", kReportCategoryNames[k],
                    mib(t).c_str(), mib(m).c_str(), 100.0 * (m - t) / t);
    } else if (t == 0) {  // nothing expected: the measured bytes say what there was
      std::snprintf(line, sizeof line, ">   %-22s %10s | %10s | %.0f bytes\n",
                    kReportCategoryNames[k], mib(t).c_str(), mib(m).c_str(), m);
    } else {
      std::snprintf(line, sizeof line, ">   %-22s %10s | %10s |\n", kReportCategoryNames[k], "-",
                    mib(m).c_str());
    }
    out += line;
  }
  out += ">   peak of all categories at once (the accountant's, peak mem): " +
         mib(worst.accountant_peak) + "\n";
  out += ">   peak resident set of the process: " + mib(worst.peak_rss) + "\n";
  return out;
}

}  // namespace tessera::train
