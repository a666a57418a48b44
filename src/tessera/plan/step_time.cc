#include "tessera/plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "tessera/core/error.h"
#include "tessera/pipeline/schedule.h"
#include "tessera/plan/layer_work.h"
#include "tessera/plan/offload_time.h"
#include "tessera/train/flops.h"

namespace tessera::plan {
namespace {

using comm::GroupKind;
using Granularity = model::RecomputePolicy::Granularity;

// Seconds of work on one rank: kernels by the host configuration's curves, collectives by the
// links their group spans (inter-host when its ranks are on more than one host).
class Pricer {
 public:
  Pricer(const MachineDescription& m, const HostConfiguration& conf, const comm::MeshLayout& mesh)
      : machine_(m), conf_(conf), mesh_(mesh) {}

  // The pass's kernels; their matrix products' part also added to *gemm where given.
  double kernels(const PassWork& w, double* gemm = nullptr) const {
    double s = 0;
    for (const KernelWork& k : w.kernels) {
      const double seconds = kernel(k.kind, k.dtype, k.size, k.amount);
      s += seconds;
      if (gemm != nullptr && is_gemm(k.kind)) *gemm += seconds;
    }
    return s;
  }
  // The pass's collectives; a ring's transfers hide behind the pass's attention kernels by the
  // overlap share of their link, up to those kernels' time.
  double comms(const PassWork& w, int rank) const {
    double s = 0, ring = 0, attention = 0;
    for (const CommWork& c : w.comms) (c.behind_attention ? ring : s) += collective(c, rank);
    if (ring <= 0) return s;
    for (const KernelWork& k : w.kernels)
      if (k.kind == KernelKind::kAttentionForward || k.kind == KernelKind::kAttentionBackward)
        attention += kernel(k.kind, k.dtype, k.size, k.amount);
    return s + ring - std::min(overlap(GroupKind::kContext, rank) * ring, attention);
  }
  double collective(const CommWork& c, int rank) const {
    return collective(c.kind, c.group, c.bytes, rank, c.ranks);
  }
  double kernel(KernelKind kind, DType dtype, double size, double amount) const {
    const auto it = conf_.kernels.find(dtype);
    const RateCurve* curve =
        it == conf_.kernels.end() ? nullptr : &it->second[static_cast<int>(kind)];
    if (kernel_kind_optional(kind) && (curve == nullptr || curve->empty())) return 0;
    if (curve == nullptr || curve->empty())
      throw Error("machine '" + machine_.name + "' has no " + dtype_name(dtype) + " rate for " +
                  kernel_kind_name(kind) + " (" + std::to_string(conf_.ranks_per_host) +
                  " rank(s) a host); add it or calibrate it");
    return amount / curve->at(size);
  }
  // The links a group of `rank` uses: between hosts when its ranks are on more than one.
  const Links& links(GroupKind group, int rank) const {
    const std::vector<int>& members = mesh_.group_of(group, rank);
    const int R = conf_.ranks_per_host;
    bool spans_hosts = false;
    for (int m : members) spans_hosts |= m / R != members.front() / R;
    return spans_hosts ? machine_.inter_host : conf_.intra_host;
  }
  // The share of a collective of that group that compute running meanwhile hides.
  double overlap(GroupKind group, int rank) const { return links(group, rank).overlap; }
  // `ranks`: a subgroup's size (0: the whole group), on the group's links.
  double collective(CollectiveKind kind, GroupKind group, double bytes, int rank,
                    int ranks = 0) const {
    const std::vector<int>& members = mesh_.group_of(group, rank);
    const int n = ranks > 0 ? ranks : static_cast<int>(members.size());
    if (n <= 1 || bytes <= 0) return 0;
    const Links& level = links(group, rank);
    const bool spans_hosts = &level == &machine_.inter_host;
    const LinkRate& link = level[static_cast<int>(kind)];
    if (!link.described())
      throw Error("machine '" + machine_.name + "' describes no " + collective_kind_name(kind) +
                  (spans_hosts ? " between hosts" : " within a host") + " (needed by a group of " +
                  std::to_string(n) + " ranks)");
    return link.seconds(kind, bytes, n);
  }

 private:
  const MachineDescription& machine_;
  const HostConfiguration& conf_;
  const comm::MeshLayout& mesh_;
};

// One rank's chunk times: kernels and tensor-parallel collectives apart.
struct ChunkTimes {
  double forward = 0, forward_tp = 0, backward = 0, backward_tp = 0;
  double gemm = 0;  // of forward + backward: the products
  double total(bool fwd) const { return fwd ? forward + forward_tp : backward + backward_tp; }
};

// How many of a chunk's `layers` rerun their forward (or attention core) in backward.
int recomputed_layers(const train::RankLayout& r, int layers) {
  if (r.recompute.granularity == Granularity::kNone) return 0;
  if (r.recompute.granularity == Granularity::kFull &&
      r.recompute.method == model::RecomputePolicy::Method::kBlock)
    return std::min(layers, r.recompute.num_layers);
  return layers;
}

std::vector<ChunkTimes> chunk_times(const model::ModelConfig& cfg, const train::RankLayout& r,
                                    const Pricer& price, int rank) {
  const LayerWork embedding = embedding_work(cfg, r);
  const PassWork head = head_work(cfg, r);
  const int P = r.pp, V = static_cast<int>(r.chunk_layers.size());
  std::vector<ChunkTimes> out(V);
  for (int c = 0; c < V; ++c) {
    const int n = static_cast<int>(r.chunk_layers[c].size());
    const int j = c * P + r.pp_rank;  // the model chunk
    ChunkTimes& t = out[c];
    // The block method recomputes a chunk's first layers; the others, all of them.
    const int rerun_layers = recomputed_layers(r, n);
    for (int i = 0; i < n; ++i) {
      const LayerWork layer = layer_work(cfg, r, r.chunk_layers[c][i]);
      t.forward += price.kernels(layer.forward, &t.gemm);
      t.forward_tp += price.comms(layer.forward, rank);
      t.backward += price.kernels(layer.backward, &t.gemm);
      t.backward_tp += price.comms(layer.backward, rank);
      if (i < rerun_layers) {
        const PassWork rerun = recompute_work(r, layer);
        t.backward += price.kernels(rerun, &t.gemm);
        t.backward_tp += price.comms(rerun, rank);
      }
    }
    if (j == 0) {
      t.forward += price.kernels(embedding.forward, &t.gemm);
      t.forward_tp += price.comms(embedding.forward, rank);
      t.backward += price.kernels(embedding.backward, &t.gemm);
      t.backward_tp += price.comms(embedding.backward, rank);
    }
    if (j == V * P - 1) {
      t.backward += price.kernels(head, &t.gemm);
      t.backward_tp += price.comms(head, rank);
    }
  }
  return out;
}

// What the reduction of `seconds` (communication time of each bucket, in the order backward
// completes them, each ready when backward has produced `ready_share` of the gradients up to and
// including it) adds to a backward of `backward_s`: with overlap, the communication thread takes
// one bucket at a time while backward goes on, and compute hides the share `hidden` of each
// (the rest is work the compute cores do, which lengthens the step); without, all of it.
double exposed_reduction(const std::vector<double>& seconds, const std::vector<double>& ready_share,
                         double backward_s, bool overlap, double hidden) {
  double total = 0;
  for (double s : seconds) total += s;
  if (!overlap) return total;
  double done = 0;
  for (size_t i = 0; i < seconds.size(); ++i)
    done = std::max(done, ready_share[i] * backward_s) + hidden * seconds[i];
  return (1 - hidden) * total + std::max(0.0, done - backward_s);
}

// One pass's work, kind by kind, with the rate each was priced at: --explain's lines.
std::string explain_pass(const char* title, double times, const PassWork& w, const Pricer& price,
                         int rank) {
  if (w.kernels.empty() && w.comms.empty()) return "";
  std::map<std::pair<int, int>, std::pair<double, double>> kinds;  // (kind, dtype) -> (amount, s)
  for (const KernelWork& k : w.kernels) {
    auto& [amount, seconds] = kinds[{static_cast<int>(k.kind), static_cast<int>(k.dtype)}];
    amount += k.amount;
    seconds += price.kernel(k.kind, k.dtype, k.size, k.amount);
  }
  char line[256];
  std::snprintf(line, sizeof line, "  %s (x %g):\n", title, times);
  std::string out = line;
  double total = 0;
  for (const auto& [key, v] : kinds) {
    const auto kind = static_cast<KernelKind>(key.first);
    const bool flops = kind <= KernelKind::kAttentionBackward;
    std::snprintf(line, sizeof line, "    %-20s %-4s %12.4g %s at %10.4g/s = %9.3f ms\n",
                  kernel_kind_name(kind), dtype_name(static_cast<DType>(key.second)), v.first,
                  flops ? "FLOP    " : "elements", v.first / v.second, 1e3 * v.second);
    out += line;
    total += v.second;
  }
  double listed = 0;
  for (const CommWork& c : w.comms) {
    const double s = price.collective(c, rank);
    std::snprintf(line, sizeof line, "    %-25s %12.4g bytes%s = %9.3f ms\n",
                  collective_kind_name(c.kind), c.bytes,
                  c.behind_attention ? " (ring step) " : "             ", 1e3 * s);
    out += line;
    listed += s;
  }
  const double exposed = price.comms(w, rank);
  if (exposed < listed - 1e-12) {
    std::snprintf(line, sizeof line, "    hidden behind the attention blocks      = %9.3f ms\n",
                  -1e3 * (listed - exposed));
    out += line;
  }
  total += exposed;
  std::snprintf(line, sizeof line, "    total %.3f ms, x %g = %.3f ms\n", 1e3 * total, times,
                1e3 * total * times);
  return out + line;
}

// Whether the trainer reduces gradient buckets while backward runs (with virtual stages it
// reduces after the last chunk's backward).
bool reduces_during_backward(const train::RankLayout& r) {
  return r.overlap_grad_reduce && r.chunk_layers.size() == 1;
}

// `total` elements cut into buckets of `bucket` from the end of the flat buffer, in the order
// backward completes them: each bucket's elements (the last one shorter).
std::vector<double> buckets_from_end(double total, double bucket) {
  std::vector<double> sizes;
  for (double done = 0; done < total;) {
    sizes.push_back(std::min(bucket, total - done));
    done += sizes.back();
  }
  return sizes;
}

// The optimizer offload's replay for rank r (plan/offload_time.h). The owned gradients are written
// as the last micro-batch's buckets complete: overlapped, bucket by bucket from the end of the
// flat buffer at the share of the last backward that has produced them (the embeddings' last,
// when backward ends); otherwise all when backward ends. The step starts when the last
// micro-batch's reduction has ended (`last_reduction` after the schedule); the update is AdamW's
// compute over the owned elements.
OptimizerSwapTimes optimizer_swap_times(const train::RankLayout& r, double parameters, double owned,
                                        double schedule_end, double last_backward,
                                        double last_reduction, double update,
                                        const StorageRates& storage) {
  OptimizerSwapShape shape;
  shape.owned_elements = owned;
  shape.arrays = r.optimizer_offload_arrays;
  shape.sub_group = static_cast<double>(r.optimizer_offload_sub_group);
  shape.buffers = r.optimizer_offload_buffers;
  shape.pipeline_read = r.optimizer_offload_pipeline_read;
  shape.pipeline_write = r.optimizer_offload_pipeline_write;
  IterationTimes it;
  const double backward_start = std::max(0.0, schedule_end - last_backward);
  if (!reduces_during_backward(r) || parameters <= 0) {
    it.gradient_writes.emplace_back(schedule_end, 4 * owned);
  } else {
    // (At most 10^4 writes: finer buckets are merged, which moves the timing little.)
    double done = 0;
    for (double n : buckets_from_end(parameters, std::max({static_cast<double>(r.bucket_elements),
                                                           parameters / 1e4, 1.0}))) {
      done += n;
      it.gradient_writes.emplace_back(backward_start + done / parameters * last_backward,
                                      4 * owned * n / parameters);
    }
  }
  it.optimizer_start = schedule_end + last_reduction;
  it.update = update;
  return simulate_optimizer_swap(shape, it, storage);
}

// ZeRO 3 parameter offload for rank r, an iteration's worth (plan/offload_time.h): every
// micro-batch's forward and backward pass replayed over the units in the order the chunk runner
// acquires them — forward: the embeddings, then the layers; backward: the head (with a tied
// output layer, the embeddings too) before the head's work, then the layers from the last (with
// their recomputation); the embeddings' backward needs no values and acquires nothing — plus
// re-faulting each part's released pages when it is read back, plus the step's writes of every
// swapped part: behind the update as far as it lasts (not when the optimizer state streams to
// the same device), and the last part's always after it, as the step waits for every write.
double param_swap_seconds(const model::ModelConfig& cfg, const train::RankLayout& r,
                          const Pricer& price, int rank, double update,
                          const StorageRates& storage) {
  TESSERA_CHECK_MSG(r.pp == 1, "internal: parameter offload under a pipeline is refused earlier");
  const std::vector<int64_t> parts = train::zero3_part_elements(cfg, r);
  const auto time = [&](const PassWork& w) { return price.kernels(w) + price.comms(w, rank); };
  const LayerWork embedding = embedding_work(cfg, r);
  const int n = static_cast<int>(r.layers.size());
  const int rerun_layers = recomputed_layers(r, n);
  std::vector<LayerWork> layers;
  for (int l = 0; l < n; ++l) layers.push_back(layer_work(cfg, r, r.layers[l]));
  TESSERA_CHECK_MSG(r.first_stage && r.last_stage && parts.size() == static_cast<size_t>(n) + 2 &&
                        r.param_offload_kept_parts.size() == parts.size(),
                    "internal: ZeRO 3 units of a dense model without a pipeline");
  // Unit u as the pass sees it: its swapped bytes and its elements for the prefetch window.
  const auto unit = [&](size_t u, double compute) {
    SwappedUnit s;
    if (parts[u] > 0 && !r.param_offload_kept_parts[u])
      s.bytes = static_cast<double>(parts[u]) * dtype_size(r.compute);
    s.elements = static_cast<double>(parts[u]) * r.dp;  // 0: persistent
    s.compute = compute;
    return s;
  };
  const size_t head = parts.size() - 1;
  std::vector<SwappedUnit> forward, backward;
  forward.push_back(unit(0, time(embedding.forward)));
  for (int l = 0; l < n; ++l) forward.push_back(unit(1 + l, time(layers[l].forward)));
  const bool tied = !cfg.untie_embeddings_and_output_weights;
  backward.push_back(unit(head, tied ? 0 : time(head_work(cfg, r))));
  if (tied) backward.push_back(unit(0, time(head_work(cfg, r))));
  // The block method recomputes a chunk's first layers; the others, all of them.
  for (int l = n - 1; l >= 0; --l)
    backward.push_back(unit(
        1 + l,
        time(layers[l].backward) + (l < rerun_layers ? time(recompute_work(r, layers[l])) : 0)));
  backward.push_back(SwappedUnit{0, 0, time(embedding.backward)});
  // Every swapped part is written once a step (the head's is not acquired in forward); a
  // micro-batch reads what its two passes acquire.
  double swapped_bytes = backward.front().bytes, last_bytes = 0, reads = 0;
  for (const SwappedUnit& u : forward) {
    swapped_bytes += u.bytes;
    if (u.bytes > 0) last_bytes = u.bytes;
  }
  if (backward.front().bytes > 0) last_bytes = backward.front().bytes;  // last in flat order
  for (const auto* pass : {&forward, &backward})
    for (const SwappedUnit& u : *pass) reads += u.bytes;
  if (swapped_bytes == 0) return 0;
  ParamSwapShape shape;
  shape.piece_bytes = static_cast<double>(r.param_offload_buffer_elements) * dtype_size(r.compute);
  shape.buffers = r.param_offload_buffers;
  shape.window = static_cast<double>(r.prefetch_elements);
  const double passes =
      simulate_param_pass(forward, shape, storage) + simulate_param_pass(backward, shape, storage);
  const double refault = price.kernel(KernelKind::kPageRefault, DType::kF32,
                                      reads / static_cast<double>(parts.size()), reads);
  const double writes = swapped_bytes / storage.write_bytes_per_s;
  const double last = last_bytes / storage.write_bytes_per_s;
  const double step =
      r.optimizer_offload_buffer_bytes >= 0 ? writes : std::max(last, writes - update);
  return static_cast<double>(r.micro_batches) * (passes + refault) + step;
}

}  // namespace

std::string explain_step_time(const model::ModelConfig& cfg, const comm::MeshLayout& mesh,
                              const std::vector<train::RankLayout>& ranks,
                              const MachineDescription& machine, const StepTimePrediction& t,
                              int rank) {
  const HostConfiguration& conf = machine.configuration(t.ranks_per_host);
  const Pricer price(machine, conf, mesh);
  const train::RankLayout& r = ranks[rank];
  const double M = static_cast<double>(r.micro_batches);
  const int layers = static_cast<int>(r.layers.size());
  // The rank's first layer (a per-layer context-parallel type list can make the others differ).
  const LayerWork layer = layer_work(cfg, r, r.layers.front());
  std::string out = "rank " + std::to_string(rank) + " on '" + machine.name + "' (" +
                    std::to_string(conf.ranks_per_host) + " rank(s) a host, " +
                    std::to_string(conf.threads_per_rank) +
                    " thread(s) a rank): " + std::to_string(layers) + " layer(s), " +
                    std::to_string(r.micro_batches) + " micro-batch(es) of " +
                    std::to_string(r.tokens) + " tokens\n";
  out += explain_pass("a layer's forward", M * layers, layer.forward, price, rank);
  out += explain_pass("a layer's backward", M * layers, layer.backward, price, rank);
  int rerun = 0;
  for (const auto& l : r.chunk_layers) rerun += recomputed_layers(r, static_cast<int>(l.size()));
  out += explain_pass("a layer's recomputation", M * rerun, recompute_work(r, layer), price, rank);
  if (r.first_stage) {
    const LayerWork e = embedding_work(cfg, r);
    out += explain_pass("the embedding's forward", M, e.forward, price, rank);
    out += explain_pass("the embedding's backward", M, e.backward, price, rank);
  }
  if (r.last_stage) out += explain_pass("the head", M, head_work(cfg, r), price, rank);
  const StepTimeComponents& c = t.ranks[rank];
  char line[768];
  std::snprintf(line, sizeof line,
                "  step: compute %.3f + layers' collectives (TP, CP) %.3f + pipeline bubble %.3f + "
                "data-parallel %.3f + optimizer %.3f + offload I/O %.3f = %.3f ms (the step: "
                "rank %d's %.3f ms)\n",
                1e3 * c.compute, 1e3 * c.tp_comm, 1e3 * c.pipeline_bubble, 1e3 * c.dp_comm,
                1e3 * c.optimizer, 1e3 * c.offload_io, 1e3 * c.total(), t.critical_rank,
                1e3 * t.step_s);
  if (r.optimizer_offload_buffer_bytes >= 0) {
    const OptimizerSwapTimes& swap = t.optimizer_swap[rank];
    std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                  "  NVMe optimizer offload: %.3f GB read + %.3f GB written an iteration at "
                  "%.2f / %.2f GB/s; the step waits %.3f ms for the gradients' writes, visits "
                  "the state in %.3f ms (the update alone %.3f ms)\n",
                  1e-9 * swap.read_bytes, 1e-9 * swap.write_bytes,
                  1e-9 * conf.storage.read_bytes_per_s, 1e-9 * conf.storage.write_bytes_per_s,
                  1e3 * swap.boundary_wait, 1e3 * swap.visit, 1e3 * swap.update);
  }
  if (r.param_offload_kept_elements >= 0)
    std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line),
                  "  NVMe parameter offload: %.3f ms an iteration (the passes' waits for reads, "
                  "the parts' re-faults, the step's writes)\n",
                  1e3 * t.param_swap_s[rank]);
  return out + line;
}

StepTimePrediction predict_step_time(const model::ModelConfig& cfg, const comm::MeshLayout& mesh,
                                     const std::vector<train::RankLayout>& ranks,
                                     const MachineDescription& machine) {
  for (const train::RankLayout& r : ranks) {
    if (r.param_offload_kept_elements < 0) continue;
    if (r.pp > 1)
      throw Error(
          "the step-time model does not cover parameter offload to NVMe under a pipeline yet");
    // Expert parallelism (or whole experts under TP) makes an MoE layer two units.
    if (train::zero3_part_elements(cfg, r).size() != r.layers.size() + 2)
      throw Error(
          "the step-time model does not cover parameter offload to NVMe with experts in units "
          "of their own yet (--expert-model-parallel-size > 1 or "
          "--expert-tensor-parallel-size 1)");
  }
  const int world = mesh.world_size();
  const HostConfiguration& conf = machine.configuration_for_job(world);
  if (machine.kind == "measured")
    for (const train::RankLayout& r : ranks)
      if (r.threads != conf.threads_per_rank)
        throw Error("machine '" + machine.name + "' was measured with " +
                    std::to_string(conf.threads_per_rank) + " thread(s) a rank at " +
                    std::to_string(conf.ranks_per_host) + " rank(s) a host; the layout runs " +
                    std::to_string(r.threads) + " (--num-threads)");
  const Pricer price(machine, conf, mesh);

  StepTimePrediction out;
  out.ranks_per_host = conf.ranks_per_host;
  out.ranks.resize(world);
  out.optimizer_swap.resize(world);
  out.param_swap_s.resize(world);
  std::vector<std::vector<ChunkTimes>> times(world);
  for (int rank = 0; rank < world; ++rank) {
    const train::RankLayout& r = ranks[rank];
    if ((r.optimizer_offload_buffer_bytes >= 0 || r.param_offload_kept_elements >= 0) &&
        !conf.storage.described())
      throw Error("machine '" + machine.name +
                  "' has no storage rates for NVMe offload: measure them with tessera-plan "
                  "--calibrate --nvme-path DIR (DIR on the offload's device)");
    times[rank] = chunk_times(cfg, r, price, rank);
  }

  // The schedule: each pipeline group simulated once with its ranks' own chunk times; every
  // activation or gradient message priced as one send over the pipeline group's link.
  std::vector<double> schedule_end(world), last_backward(world);
  for (const std::vector<int>& group : mesh.all_groups(GroupKind::kPipeline)) {
    const train::RankLayout& r0 = ranks[group.front()];
    const int P = r0.pp;
    const double M = static_cast<double>(r0.micro_batches);
    if (P == 1) {
      const int rank = group.front();
      const ChunkTimes& t = times[rank][0];
      schedule_end[rank] = M * (t.total(true) + t.total(false));
      last_backward[rank] = t.total(false);
      continue;
    }
    pipeline::ScheduleShape shape{P, static_cast<int>(r0.micro_batches),
                                  static_cast<int>(r0.chunk_layers.size())};
    std::vector<std::vector<pipeline::Step>> lists(P);
    for (int p = 0; p < P; ++p) lists[p] = pipeline::build_schedule(r0.schedule, shape, p);
    pipeline::OperationTimes op;
    const double rows = r0.sequence_parallel && r0.tp > 1 ? r0.tokens / r0.tp : r0.tokens;
    op.transfer = price.collective(CollectiveKind::kSendRecv, GroupKind::kPipeline,
                                   rows * cfg.hidden_size * dtype_size(r0.compute), group.front());
    // A send runs on the communication thread; the share compute does not hide is the compute
    // cores' work, charged to the operation that sends.
    const double send_work = (1 - price.overlap(GroupKind::kPipeline, group.front())) * op.transfer;
    op.compute = [&](int p, int chunk, bool forward) {
      return times[group[p]][chunk].total(forward) + send_work;
    };
    const pipeline::Simulation sim = pipeline::simulate(shape, lists, op);
    TESSERA_CHECK_MSG(!sim.deadlock, sim.problem);
    for (int p = 0; p < P; ++p) {
      schedule_end[group[p]] = sim.finish[p];
      last_backward[group[p]] = times[group[p]][0].total(false);
    }
  }

  for (int rank = 0; rank < world; ++rank) {
    const train::RankLayout& r = ranks[rank];
    StepTimeComponents& c = out.ranks[rank];
    const double M = static_cast<double>(r.micro_batches);
    for (const ChunkTimes& t : times[rank]) {
      c.compute += M * (t.forward + t.backward);
      c.compute_gemm += M * t.gemm;
      c.tp_comm += M * (t.forward_tp + t.backward_tp);
    }
    c.pipeline_bubble = std::max(0.0, schedule_end[rank] - c.compute - c.tp_comm);

    // Gradient reduction: the dense parameters over DP x CP, the experts over the expert-DP group;
    // each part in buckets of about bucket_elements fp32 elements from its end (ZeRO 3: one per
    // model unit, here taken as one per layer), ready as backward produces its share of the part,
    // the two parts' buckets queued together in that order.
    const train::ModelStateBytes states = train::theoretical_model_states(cfg, r);
    double last_reduction = 0;  // the last micro-batch's reduction beyond its backward
    const double P = states.parameter_elements;
    struct Part {
      double elements;
      GroupKind group;
      int ranks;
    };
    std::vector<Part> parts;
    for (const Part& part : {Part{P - states.expert_elements, GroupKind::kDataContext, r.dp},
                             Part{states.expert_elements, GroupKind::kExpertData, r.expert_dp}})
      if (part.elements > 0 && part.ranks > 1) parts.push_back(part);
    if (!parts.empty()) {
      const CollectiveKind reduce =
          r.zero_stage == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter;
      const int layers = std::max<int>(1, static_cast<int>(r.layers.size()));
      std::vector<std::pair<double, double>> queue;  // (ready share, seconds)
      for (const Part& part : parts) {
        // (At most 10^5 buckets are queued: finer ones are merged, which moves the overlap little.)
        const double bucket = std::max({r.zero_stage == 3 ? part.elements / (layers + 1)
                                                          : static_cast<double>(r.bucket_elements),
                                        part.elements / 1e5, 1.0});
        // ZeRO 0 overlapped may reduce the word embedding by rows (distributed/
        // data_parallel_grads.h): its flat gradient leaves first, final once the output layer's
        // backward is (taken as backward's start); after backward the ranks exchange their rows'
        // indices and all-reduce the union of the rows their tokens touched.
        const double C = static_cast<double>(cfg.hidden_size);
        // A bucket of n elements: n values of the reduction's type on the wire; in 16 bits, also
        // the rounding of its n fp32 values to 16-bit copies and the widening back of the result
        // (n, or this rank's n / ranks of a reduce-scatter) on the communication thread, 6 bytes
        // an element each way, priced at the compute dtype's add rate (an add of m elements of
        // size e moves 3 e m bytes).
        const double wire = dtype_size(r.grad_reduce_dtype), e = dtype_size(r.compute);
        const auto reduction = [&](CollectiveKind kind, double n) {
          const double out = kind == CollectiveKind::kReduceScatter ? n / part.ranks : n;
          const double convert =
              r.grad_reduce_dtype == DType::kF32
                  ? 0.0
                  : price.kernel(KernelKind::kAdd, r.compute, n, 6 * (n + out) / (3 * e));
          return price.collective(kind, part.group, wire * n, rank) + convert;
        };
        const train::EmbeddingRowsTheory rows =
            part.group == GroupKind::kDataContext && reduces_during_backward(r)
                ? train::embedding_rows_theory(cfg, r)
                : train::EmbeddingRowsTheory{};
        const double embedding = rows.vocab_rows * C;
        for (double n : buckets_from_end(embedding, bucket))
          queue.emplace_back(0.0, reduction(reduce, n));
        const double rest = part.elements - embedding;
        double done = 0;
        for (double n : buckets_from_end(rest, bucket)) {
          done += n;
          queue.emplace_back(done / rest, reduction(reduce, n));
        }
        // The rows: every rank's count, their indices padded to the longest list, their union.
        if (rows.applies)
          queue.emplace_back(1.0, price.collective(CollectiveKind::kAllGather, part.group,
                                                   8.0 * part.ranks, rank) +
                                      price.collective(CollectiveKind::kAllGather, part.group,
                                                       4 * rows.mine * part.ranks, rank) +
                                      reduction(CollectiveKind::kAllReduce, rows.all * C));
      }
      std::stable_sort(queue.begin(), queue.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<double> seconds, ready;
      for (const auto& [share, s] : queue) {
        ready.push_back(share);
        seconds.push_back(s);
      }
      const bool every_micro_batch = r.zero_stage >= 2;
      const double hidden = price.overlap(GroupKind::kDataContext, rank);
      const double once = exposed_reduction(seconds, ready, last_backward[rank],
                                            reduces_during_backward(r), hidden);
      last_reduction = once;
      c.dp_comm += every_micro_batch ? M * once : once;
      // The updated values gathered (ZeRO 1-2; ZeRO 3 around every use), and the pages of the
      // unowned parts given back and faulted in again (ZeRO 2-3's gradients every micro-batch;
      // ZeRO 3's gathered values twice a micro-batch, forward and backward).
      double gather = 0, unowned_values = 0, unowned_gradients = 0;
      for (const Part& part : parts) {
        const double values = part.elements * dtype_size(r.compute);
        gather += price.collective(CollectiveKind::kAllGather, part.group, values, rank);
        unowned_values += values * (1.0 - 1.0 / part.ranks);
        unowned_gradients += 4 * part.elements * (1.0 - 1.0 / part.ranks);
      }
      if (r.zero_stage == 1 || r.zero_stage == 2) c.dp_comm += gather;
      if (r.zero_stage >= 2)
        c.dp_comm += M * price.kernel(KernelKind::kPageRefault, DType::kF32,
                                      unowned_gradients / layers, unowned_gradients);
      if (r.zero_stage == 3) {
        // Gathered before every forward and again in backward, prefetched under the compute of
        // the units before: what the pass's compute does not hide waits, and the first unit.
        const ChunkTimes& t = times[rank][0];
        const double first = gather / std::max(1, layers + 1);
        const auto pass = [&](double compute) {
          return (1 - hidden) * gather + std::max(first, hidden * gather - compute);
        };
        const double refault = price.kernel(KernelKind::kPageRefault, DType::kF32,
                                            unowned_values / layers, unowned_values);
        c.dp_comm += M * (pass(t.forward) + pass(t.backward) + 2 * refault);
      }
    }
    // Tied embeddings on different stages: their gradients are all-reduced between them.
    if (r.pp > 1 && !cfg.untie_embeddings_and_output_weights && (r.first_stage || r.last_stage)) {
      const double rows = static_cast<double>(cfg.padded_vocab_size(r.tp)) / r.tp;
      c.dp_comm += price.collective(CollectiveKind::kAllReduce, GroupKind::kEmbedding,
                                    4 * rows * cfg.hidden_size, rank);
    }

    const double owned = train::optimizer_owned_elements(cfg, r);
    const double update = price.kernel(KernelKind::kOptimizer, r.compute, owned, owned);
    c.optimizer = price.kernel(KernelKind::kZeroFill, DType::kF32, P, P) +
                  price.kernel(KernelKind::kGradNorm, DType::kF32, owned, owned) + update;
    if (r.optimizer_offload_buffer_bytes >= 0) {
      const OptimizerSwapTimes& swap = out.optimizer_swap[rank] =
          optimizer_swap_times(r, P, owned, schedule_end[rank], last_backward[rank], last_reduction,
                               update, conf.storage);
      // Backward writes the gradients into pages given back at the last boundary (a bucket's
      // worth at a time): the owned part (ZeRO 2-3 give the rest back already, priced above),
      // the whole buffer at ZeRO 1.
      const double released = 4 * (r.zero_stage == 1 ? P : owned);
      c.offload_io =
          swap.exposed() + price.kernel(KernelKind::kPageRefault, DType::kF32,
                                        std::min(released, 4.0 * r.bucket_elements), released);
    }
    if (r.param_offload_kept_elements >= 0) {
      out.param_swap_s[rank] = param_swap_seconds(cfg, r, price, rank, update, conf.storage);
      c.offload_io += out.param_swap_s[rank];
    }
    const double step = c.total();
    if (step > out.step_s) {
      out.step_s = step;
      out.critical_rank = rank;
    }
  }
  out.components = out.ranks[out.critical_rank];
  return out;
}

double predicted_mfu(const model::ModelConfig& cfg, int64_t global_batch, int world_size,
                     const StepTimePrediction& p, const MachineDescription& machine, DType dtype) {
  if (p.step_s <= 0) return 0;
  double peak = 0;
  if (const auto stated = machine.peak_flops_per_s.find(dtype);
      stated != machine.peak_flops_per_s.end()) {
    peak = stated->second;
  } else {
    const HostConfiguration& conf = machine.configuration(p.ranks_per_host);
    const auto it = conf.kernels.find(dtype);
    if (it == conf.kernels.end()) return 0;
    const RateCurve& gemm = it->second[static_cast<int>(KernelKind::kGemmForward)];
    for (const auto& point : gemm.points) peak = std::max(peak, point.second);
  }
  if (peak <= 0) return 0;
  const double flops = train::model_flops(cfg, cfg.padded_vocab_size(1), global_batch);
  return flops / (p.step_s * world_size * peak);
}

}  // namespace tessera::plan
