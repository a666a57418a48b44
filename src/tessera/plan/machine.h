// A machine description: what tessera-plan's step-time model knows about the machine a layout runs
// on. `tessera-plan --calibrate` measures one (the kernels' and collectives' own code paths on
// this machine, plan/calibrate.h); descriptions of clusters Tessera cannot reach are written by
// hand (examples/machines/, "kind": "description" — a description, not a measurement).
//
// JSON (docs/planning.md has an annotated example); every key is required unless marked, and an
// unknown key is an error, so a typo cannot silently fall back to a default:
//   {"name": "...", "kind": "measured" | "description", "source": "...",
//    "hosts": H, "cores_per_host": C, "memory_per_host_bytes": B,
//    "configurations": [            // one per number of ranks sharing a host
//      {"ranks_per_host": R, "threads_per_rank": T,
//       "kernels": {"fp32": {KERNEL: [[size, rate], ...], ...}, "bf16": {...}, "fp16": {...}},
//       "intra_host": {COLLECTIVE: {"latency_s": a, "bus_bytes_per_s": b}, ...,
//                      "overlap": f},                                            // R > 1
//       "storage": {"read_bytes_per_s": r, "write_bytes_per_s": w}}               // optional
//    ],
//    "inter_host": {COLLECTIVE: {...}},                                            // H > 1
//    "peak_flops_per_s": {"bf16": F, ...}}                                          // optional
// A configuration's rates are one rank's while all R ranks of the host run (they share the
// memory system and the cores). KERNEL and COLLECTIVE names: kernel_kind_name,
// collective_kind_name. A rate curve lists (size, rate) points in increasing size; between them
// the rate is interpolated linearly in log(size), beyond them it is the nearest end's.
#pragma once

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::plan {

// The kinds of work the time model prices, with their size and rate units.
enum class KernelKind {
  kGemmForward,        // a linear layer's product: FLOP/s by the product's smallest dimension
  kGemmInputGrad,      // its input gradient (B not transposed): FLOP/s by smallest dimension
  kGemmWeightGrad,     // its weight gradient (A transposed, accumulating): FLOP/s, same size
  kAttentionForward,   // causal attention's core: forward FLOP/s by sequence length
  kAttentionBackward,  // its backward: forward-FLOP units per second, by sequence length
  kNormForward,        // LayerNorm / RMSNorm: elements/s by elements per call
  kNormBackward,
  // GELU, or SwiGLU's silu(gate) x value: elements/s of the activation's input, one an output
  // for GELU, two (the gate and the value) for SwiGLU, whose kernels take 1.9x (forward) and
  // 2.2x (backward) GELU's time an output (kernels::swiglu_*, 1024 x 512 fp32, the EPYC).
  kActivationForward,
  kActivationBackward,
  kAdd,           // residual and bias adds: elements/s
  kDropout,       // dropout mask and scale, forward or backward: elements/s
  kRope,          // rotary embedding of q and k: elements/s
  kEmbedding,     // embedding lookup (forward) or scatter-add (backward): elements/s
  kCrossEntropy,  // softmax cross-entropy forward and backward: logit elements/s
  kOptimizer,     // AdamW over fp32 master weights: parameter elements/s
  kGradNorm,      // sum of squares over gradients: elements/s
  kZeroFill,      // zeroing the gradient buffers: elements/s
  kPageRefault,   // touching memory whose pages were given back (ZeRO 2-3's unowned parts):
                  // the extra seconds beyond the write, as bytes/s by bytes a call
  // The attention probabilities' dropout mask, drawn in forward and again in backward over the
  // causal scores (B x heads x T^2 / 2 a pass): score elements/s by sequence length. Optional:
  // a description whose attention rates include it leaves it out, and it is then priced at 0.
  kAttentionDropout,
  kCount
};
inline constexpr int kKernelKinds = static_cast<int>(KernelKind::kCount);
// A kind a description may leave out, priced at 0 then: the attention dropout's mask, which a
// description's attention rates may already include (the DGX A100 one's do).
inline bool kernel_kind_optional(KernelKind kind) { return kind == KernelKind::kAttentionDropout; }
// The linear layers' matrix products (the kinds kernels::gemm runs).
inline bool is_gemm(KernelKind kind) {
  return kind == KernelKind::kGemmForward || kind == KernelKind::kGemmInputGrad ||
         kind == KernelKind::kGemmWeightGrad;
}
const char* kernel_kind_name(KernelKind kind);

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kSendRecv, kCount };
inline constexpr int kCollectiveKinds = static_cast<int>(CollectiveKind::kCount);
const char* collective_kind_name(CollectiveKind kind);

// Rates at sizes, interpolated log-linearly in size between points, constant beyond the ends.
struct RateCurve {
  std::vector<std::pair<double, double>> points;  // (size, rate > 0), sizes increasing
  bool empty() const { return points.empty(); }
  double at(double size) const;
};

// A collective's cost on n ranks moving `bytes` (the whole buffer: an all-reduce's input, a
// reduce-scatter's input, an all-gather's output, a message): latency * (n - 1) + bytes *
// factor / bus_bytes_per_s, where factor is the ring algorithm's share of the buffer a rank
// sends (all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n, a message 1) — the "bus
// bandwidth" of nccl-tests (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
struct LinkRate {
  double latency_s = 0;
  double bus_bytes_per_s = 0;  // 0: not described
  bool described() const { return bus_bytes_per_s > 0; }
  double seconds(CollectiveKind kind, double bytes, int n) const;
};
// The collectives of one level (within a host, between hosts), and how much of a collective
// that runs on the communication thread while compute goes on is hidden behind that compute:
// `overlap` 1 where the transfer needs no compute core (a GPU's copy engines, a NIC), near 0 on a
// host whose cores all compute and move the bytes themselves (shared-memory MPI: the transfer
// is CPU work). Measured by --calibrate; 1 when a description leaves it out.
struct Links {
  std::array<LinkRate, kCollectiveKinds> rates{};
  double overlap = 1;
  LinkRate& operator[](int kind) { return rates[kind]; }
  const LinkRate& operator[](int kind) const { return rates[kind]; }
  void fill(const LinkRate& r) { rates.fill(r); }
};

// The swap directory's direct-I/O rates for one rank while every rank of the host streams to the
// same device (NVMe offload's reads and writes; 0: not described). Reads and writes are priced
// one after the other: a device serves them from one queue.
struct StorageRates {
  double read_bytes_per_s = 0, write_bytes_per_s = 0;
  bool described() const { return read_bytes_per_s > 0 && write_bytes_per_s > 0; }
};

// One rank's rates while `ranks_per_host` ranks, of `threads_per_rank` threads each, share a host:
// the kernels' curves by dtype and kind, and the collectives between ranks of that host.
struct HostConfiguration {
  int ranks_per_host = 1, threads_per_rank = 1;
  // kernels[dtype][kind]; a dtype absent from the JSON has no curves (empty).
  std::map<DType, std::array<RateCurve, kKernelKinds>> kernels;
  Links intra_host;
  StorageRates storage;
  // What a rank holds resident beside the memory accountant's blocks (core/memory.h
  // process_baseline_bytes, measured by --calibrate after its kernels, before its collectives); 0
  // when the description has none, and the resident set is then not predicted.
  double resident_baseline_bytes = 0;
};

// A whole machine: its hosts (ranks fill them in rank order), their configurations, the links
// between hosts. `kind` says whether it was measured (--calibrate) or described by hand.
struct MachineDescription {
  std::string name, kind, source;
  int hosts = 1, cores_per_host = 1;
  double memory_per_host_bytes = 0;
  std::vector<HostConfiguration> configurations;
  Links inter_host;
  // A rank's peak FLOP/s by dtype as its maker states it (optional: MFU's denominator; without
  // it the best measured product rate stands in).
  std::map<DType, double> peak_flops_per_s;

  // The configuration for `ranks_per_host` ranks on a host; tessera::Error naming the file's
  // configurations when there is none (calibrate with that many ranks).
  const HostConfiguration& configuration(int ranks_per_host) const;
  // The configuration a job of `world_size` ranks runs on: ranks fill hosts in rank order, as
  // many a host as the largest configuration has (all of them on one host when fewer), and that
  // many must have a configuration — or, for a description, one with more slots than the job
  // uses (its ranks' rates do not depend on idle slots: a GPU each). tessera::Error when the job
  // needs more hosts than the machine has, or no configuration fits.
  const HostConfiguration& configuration_for_job(int world_size) const;
};

// Reads and checks a description (`origin` names it in messages: the file's path). Any problem —
// not JSON, a missing or unknown key, a rate that is not positive, sizes out of order — is one
// tessera::Error naming the origin and the key.
MachineDescription read_machine(const std::string& path);
MachineDescription parse_machine(const std::string& text, const std::string& origin);

// The JSON of a description (what read_machine reads back).
std::string machine_json(const MachineDescription& m);

// Writes the description to `path` atomically (core/file_io.h AtomicFile: a reader never sees
// half a file); tessera::Error when it cannot.
void write_machine(const MachineDescription& m, const std::string& path);
// Whether `path` names an existing regular file (a directory is an error: tessera::Error).
bool machine_file_exists(const std::string& path);
// tessera::Error unless a file can be created beside `path` (checked before a calibration
// measures for a minute and then cannot save it).
void check_machine_writable(const std::string& path);
// Adds `c` to `m`, replacing a configuration for the same ranks per host, ordered by it.
void set_configuration(MachineDescription& m, HostConfiguration c);

// This host's online cores (what --calibrate records, with core/memory.h's host_memory_bytes).
int host_cores();

}  // namespace tessera::plan
