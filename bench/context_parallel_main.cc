// context_parallel: the figures of context parallelism (docs/context_parallel.md), under
// `mpirun -np N` (N = the CP size; 1 runs without MPI). Layers of llama-tiny's shape (hidden 64,
// 4 query heads, 2 key/value groups of 16, SwiGLU 176, RoPE), one sample of S tokens.
//
//   --what attention --type p2p|all_gather|a2a [--seq S] [--steps K]
//     The attention core of one layer, forward + backward, K steps after a warm-up, the way the
//     model runs it (context/block_attention.h, context/head_exchange.h): per rank the query-key
//     pairs its kernels computed (counted by BlockAttention; for a2a the whole kernel's causal
//     triangle of its heads), the same count had the sequence been split into N contiguous
//     pieces instead of the load-balanced chunks, the median step time, the time waiting on
//     communication, and the bytes the runtime handed to MPI on the CP group per step against
//     the analytic count of docs/context_parallel.md.
//   --what memory [--seq S] [--type T]
//     A two-layer model, forward + backward of the sample: per rank the peak of the activation
//     (and communication-buffer) bytes the memory accountant saw.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/context/block_attention.h"
#include "tessera/context/context_parallel.h"
#include "tessera/context/head_exchange.h"
#include "tessera/core/clock.h"
#include "tessera/core/error.h"
#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/attention.h"
#include "tessera/model/gpt_model.h"

namespace {

using namespace tessera;

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}
std::string sarg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

model::ModelConfig config(int64_t S) {
  model::ModelConfig c = model::preset("llama-tiny");
  c.seq_length = S;
  c.attention_dropout = c.hidden_dropout = 0.0f;
  return c;
}

Tensor random(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(gen);
  return t;
}

// Causal pairs of the queries at positions [q0, q0 + n) against every earlier key.
int64_t prefix_pairs(int64_t q0, int64_t n) { return n * q0 + n * (n + 1) / 2; }

// Gathers one value per rank to every rank (in thousandths: counts stay exact, times keep
// microseconds).
std::vector<double> gather(const std::shared_ptr<comm::ProcessGroup>& g, double x) {
  if (!g) return {x};
  Tensor in = Tensor::empty({1}, DType::kI64), out = Tensor::empty({g->size()}, DType::kI64);
  in.data<int64_t>()[0] = std::llround(x * 1000);
  g->all_gather(in, out).wait();
  std::vector<double> v;
  for (int i = 0; i < g->size(); ++i) v.push_back(out.data<int64_t>()[i] / 1000.0);
  return v;
}

void print_per_rank(const char* what, const std::vector<double>& v, const char* fmt) {
  std::printf("%-34s", what);
  for (double x : v) std::printf(fmt, x);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::printf("   spread (max-min)/max %.2f%%\n", *hi > 0 ? 100.0 * (*hi - *lo) / *hi : 0.0);
}

int attention(const std::shared_ptr<comm::ProcessGroup>& world, const std::string& type, int64_t S,
              int steps) {
  const int N = world ? world->size() : 1, r = world ? world->rank() : 0;
  const model::ModelConfig cfg = config(S);
  const int NH = cfg.num_attention_heads, KV = cfg.kv_heads(), HD = cfg.head_dim();
  const int64_t T = S / N, W = (int64_t{NH} + 2 * KV) * HD;
  const Tensor qkv = random(T, W, 10 + r), dout = random(T, int64_t{NH} * HD, 20 + r);
  kernels::AttentionDropout d;
  d.key = philox_key(1, RngPurpose::kAttentionDropout, 0);
  int64_t pairs = 0;
  std::vector<double> times, waits;
  std::unique_ptr<context::BlockAttention> blocks;
  context::HeadExchange exchange(world);
  context::HeadColumns qkv_cols, out_cols;
  if (type == "a2a") {
    qkv_cols = context::qkv_columns(NH, KV, HD, N);
    out_cols = context::head_columns(NH, HD, N);
  } else {
    blocks =
        std::make_unique<context::BlockAttention>(world, context::parse_comm_type(type, "--type"));
  }
  const context::BlockAttentionShape shape{1, T, S, NH, KV, HD, d, nullptr};
  comm::CommStats stats;
  for (int step = 0; step <= steps; ++step) {
    if (world) world->barrier().wait();
    if (world) world->reset_stats();
    const double wait0 = blocks ? blocks->comm_seconds() : exchange.comm_seconds();
    const Clock::time_point t0 = Clock::now();
    if (blocks) {
      Tensor attn, lse;
      blocks->forward(attn, lse, qkv, shape);
      blocks->backward(dout, qkv, attn, lse, shape);
    } else {
      const Tensor h = exchange.to_heads(qkv, 1, qkv_cols);
      const int heads = NH / N, kv = static_cast<int>(qkv_cols.heads_width / HD - heads) / 2;
      Tensor out = Tensor::empty({S, int64_t{heads} * HD}, DType::kF32);
      Tensor lse = Tensor::empty({1, heads, S}, DType::kF32);
      kernels::attention_forward(out.data<float>(), lse.data<float>(), h.data<float>(), 1, S, heads,
                                 kv, HD, d);
      const Tensor attn = exchange.to_sequence(out, 1, out_cols);
      const Tensor dh = exchange.to_heads(dout, 1, out_cols);
      Tensor dqkv = Tensor::empty(h.shape(), DType::kF32);
      kernels::attention_backward(dqkv.data<float>(), dh.data<float>(), h.data<float>(),
                                  out.data<float>(), lse.data<float>(), 1, S, heads, kv, HD, d);
      exchange.to_sequence(dqkv, 1, qkv_cols);
      if (step > 0) pairs += 2 * int64_t{heads} * prefix_pairs(0, S);  // forward and backward
    }
    const double t = seconds_since(t0);
    if (world) stats = world->stats();
    if (step == 0) continue;  // warm-up
    times.push_back(t);
    waits.push_back((blocks ? blocks->comm_seconds() : exchange.comm_seconds()) - wait0);
  }
  if (blocks) pairs = blocks->pairs() * steps / (steps + 1);  // the warm-up step's share out
  std::sort(times.begin(), times.end());
  std::sort(waits.begin(), waits.end());
  // The contiguous split: rank r's queries are [r T, (r + 1) T), forward and backward.
  const int64_t contiguous = 2 * int64_t{NH} * prefix_pairs(r * T, T);
  if (r == 0)
    std::printf(
        "context_parallel attention: CP %d, --cp-comm-type %s, S %lld, heads %d/%d of %d, "
        "%d steps (median), %d thread(s) per rank\n",
        N, type.c_str(), static_cast<long long>(S), NH, KV, HD, steps, num_threads());
  const auto p = gather(world, static_cast<double>(pairs) / steps);
  const auto c = gather(world, static_cast<double>(contiguous));
  const auto tm = gather(world, times[times.size() / 2] * 1e3);
  const auto wt = gather(world, waits[waits.size() / 2] * 1e3);
  const double bytes = world ? static_cast<double>(stats.total_sent_bytes()) : 0.0;
  const auto by = gather(world, bytes);
  if (r == 0) {
    print_per_rank("pairs per step, load-balanced", p, " %.4g");
    print_per_rank("pairs per step, contiguous split", c, " %.4g");
    print_per_rank("attention fwd+bwd (ms)", tm, " %.1f");
    print_per_rank("  of it waiting on communication", wt, " %.1f");
    // Analytic bytes handed to MPI per rank per step (docs/context_parallel.md), fp32: K the
    // rank's key/value block, the dK/dV block the same size.
    const double K = 2.0 * KV * HD * T * 4;
    double model = 0;
    if (type == "p2p") model = 2.0 * (N - 1) * K + N * K;
    if (type == "all_gather") model = 2.0 * K + N * K;
    if (type == "a2a") {
      const double w_qkv = (NH / N + 2.0 * (KV % N == 0 ? KV / N : 1)) * HD, w_out = NH / N * HD;
      model = 2.0 * S * (w_qkv + w_out) * 4;
    }
    print_per_rank("bytes to MPI per step (counted)", by, " %.0f");
    std::printf("%-34s %.0f\n", "bytes to MPI per step (analytic)", model);
  }
  return 0;
}

int memory(const std::shared_ptr<comm::ProcessGroup>& world, const std::string& type, int64_t S) {
  const int N = world ? world->size() : 1, r = world ? world->rank() : 0;
  const model::ModelConfig cfg = config(S);
  context::ContextParallel cp;
  if (N > 1) cp = context::ContextParallel(world, {context::parse_comm_type(type, "--type")});
  model::GPTModel m(cfg, DType::kF32, 1, {}, 1, {}, nullptr, nullptr, cp);
  const int64_t T = S / N;
  std::vector<int32_t> tokens(T), targets(T);
  std::mt19937 gen(3 + r);
  for (int64_t t = 0; t < T; ++t) {
    tokens[t] = static_cast<int32_t>(gen() % cfg.vocab_size);
    targets[t] = static_cast<int32_t>(gen() % cfg.vocab_size);
  }
  const model::Batch batch{tokens.data(), targets.data(), nullptr, 1, T};
  const model::StepContext ctx = m.context(1, T, 0, 1, 1, true);
  m.forward_backward(batch, ctx, 1.0f / S);  // warm-up: scratch and thread pools
  MemoryAccountant::instance().reset_peaks();
  const Clock::time_point t0 = Clock::now();
  m.forward_backward(batch, ctx, 1.0f / S);
  const double seconds = seconds_since(t0);
  const MemorySnapshot snap = MemoryAccountant::instance().snapshot();
  const double act = snap.peak[static_cast<int>(MemoryCategory::kActivations)] / 1048576.0;
  const double comm = snap.peak[static_cast<int>(MemoryCategory::kComm)] / 1048576.0;
  const auto a = gather(world, act), c = gather(world, comm), s = gather(world, seconds);
  if (r == 0) {
    std::printf("context_parallel memory: CP %d (%s), S %lld, llama-tiny layers, one sample\n", N,
                N > 1 ? type.c_str() : "-", static_cast<long long>(S));
    print_per_rank("peak activations (MiB)", a, " %.2f");
    print_per_rank("peak communication buffers (MiB)", c, " %.2f");
    print_per_rank("forward+backward (s)", s, " %.2f");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = sarg(argc, argv, "--what", "attention");
  const std::string type = sarg(argc, argv, "--type", "p2p");
  const int64_t S = arg(argc, argv, "--seq", 4096);
  const int steps = arg(argc, argv, "--steps", 5);
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  std::shared_ptr<comm::ProcessGroup> world;
  if (launched != nullptr && std::atoi(launched) > 1) world = comm::ProcessGroup::world();
  const int N = world ? world->size() : 1;
  if (S % (2 * N) != 0) {
    std::fprintf(stderr, "context_parallel: --seq %lld is not divisible by 2 x %d ranks\n",
                 static_cast<long long>(S), N);
    return 2;
  }
  set_num_threads(arg(argc, argv, "--threads", 1));
  int rc = 0;
  try {
    if (type == "a2a+p2p")
      throw Error("--type a2a+p2p: not measured here (its blocks are p2p's over groups of ranks)");
    rc = what == "memory" ? memory(world, type, S) : attention(world, type, S, steps);
  } catch (const Error& e) {
    std::fprintf(stderr, "context_parallel: %s\n", e.what());
    if (N > 1) comm::abort_job(std::string("context_parallel: ") + e.what(), 2);
    return 2;
  }
  world.reset();
  if (N > 1) comm::shutdown();
  return rc;
}
