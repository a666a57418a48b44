#include "tessera/plan/calibrate.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "tessera/core/memory.h"
#include "tessera/core/tensor.h"
#include "tessera/core/threads.h"
#include "tessera/kernels/activations.h"
#include "tessera/kernels/adamw.h"
#include "tessera/kernels/attention.h"
#include "tessera/kernels/cross_entropy.h"
#include "tessera/kernels/dropout.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/embedding.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/norms.h"
#include "tessera/kernels/rope.h"

namespace tessera::plan {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The sizes a calibration measures up to, and the window of a timing round: 40 ms, or 5 ms for
// --quick (a test of the path, not a measurement).
struct Limits {
  int64_t width, length, elements, bytes;
  double round_seconds;
};

// Seconds per call of `run`: after a warm-up call, the median of five rounds, each repeating the
// call for at least lim.round_seconds, every rank starting each round together (on a shared
// machine a shorter or single window is another tenant's as often as ours).
double seconds_per_call(comm::ProcessGroup& world, const Limits& lim,
                        const std::function<void()>& run) {
  run();
  std::array<double, 5> rounds{};
  for (double& r : rounds) {
    world.barrier().wait();
    const Clock::time_point t0 = Clock::now();
    int calls = 0;
    double elapsed = 0;
    do {
      run();
      ++calls;
      elapsed = since(t0);
    } while (elapsed < lim.round_seconds || calls < 2);
    r = elapsed / calls;
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

// Seconds per call of `run` repeated exactly `calls` times a round (a collective's calls must
// match on every rank): after a warm-up call, the median of `rounds` rounds, every rank starting
// each round together.
double seconds_per_fixed_calls(comm::ProcessGroup& world, const std::function<void()>& run,
                               int calls, int rounds) {
  run();
  std::vector<double> seconds(rounds);
  for (double& r : seconds) {
    world.barrier().wait();
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < calls; ++i) run();
    r = since(t0) / calls;
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[rounds / 2];
}

// The operands and outputs the benchmarks touch: in the page pool, as a step's tensors are, so that
// the heap is left as a step leaves it when the resident baseline is measured (calibrate_host).
template <typename T>
using Buffer = std::vector<T, TrackedAllocator<T>>;

// Small values of both signs, away from zero and the subnormals (which some paths treat apart).
template <typename T>
Buffer<T> values(size_t n, float scale = 0.05f) {
  Buffer<T> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<T>(scale * (static_cast<float>(i % 97) / 48.5f - 1.0f) + 1e-3f);
  return out;
}

using Curves = std::array<RateCurve, kKernelKinds>;

// The largest sizes measured (quick: the smallest few of each, for tests).
void add_point(Curves& c, KernelKind kind, double size, double rate) {
  c[static_cast<int>(kind)].points.emplace_back(size, rate);
}

// Copies of one call's operands, about 64 MiB together (`least` to 64 of them), handed out in
// turn: a call then finds its operands in the last-level cache or memory, not the core's own
// caches, as a step does (measure_gemms, measure_elementwise).
template <typename Operands>
class RotatingOperands {
 public:
  RotatingOperands(int64_t bytes_a_set, int least, const std::function<Operands()>& make) {
    constexpr int64_t kColdBytes = int64_t{64} << 20;
    const int64_t copies = std::clamp<int64_t>(kColdBytes / bytes_a_set, least, 64);
    for (int64_t i = 0; i < copies; ++i) sets_.push_back(make());
  }
  Operands& next() { return sets_[next_++ % sets_.size()]; }
  Operands& first() { return sets_.front(); }

 private:
  std::vector<Operands> sets_;
  size_t next_ = 0;
};

// A transformer layer's products at 1024 rows and hidden widths C = 64 .. 1024: the q/k/v
// projection (C -> 3C), the output projection (C -> C), the MLP's up (C -> 4C) and down (4C -> C)
// projections, timed together for each of a linear layer's three products (forward, input
// gradient, weight gradient), so each rate is that of the layer's mix of shapes (keyed by C, the
// smallest dimension of every product).
template <typename T>
void measure_gemms(comm::ProcessGroup& world, Curves& c, const Limits& lim) {
  constexpr int64_t M = 1024;
  for (int64_t C = 64; C <= lim.width; C *= 2) {
    const int64_t shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // (in, out)
    // Each call takes the next set of operands: in a step every layer's weights, saved inputs
    // and gradients are touched once a pass (one set, reused call after call, priced a small
    // GPT's products at 0.557 s a step where a profile of the step measured ~0.62 s;
    // docs/planning.md).
    struct Operands {
      Buffer<T> x, w, dy;
      Buffer<float> dw;
    };
    RotatingOperands<Operands> sets(
        static_cast<int64_t>(sizeof(T)) * (4 * C * C + 2 * M * 4 * C) + 4 * (4 * C * C), 2, [&] {
          return Operands{values<T>(M * 4 * C), values<T>(4 * C * C), values<T>(M * 4 * C),
                          Buffer<float>(4 * C * C, 0.0f)};
        });
    Buffer<T> y(M * 4 * C), dx(M * 4 * C);
    double flops = 0;
    for (const auto& [in, out] : shapes) flops += 2.0 * M * in * out;
    const double fwd = seconds_per_call(world, lim, [&] {
      Operands& o = sets.next();
      for (const auto& [in, out] : shapes)
        kernels::gemm(false, true, M, out, in, 1.0f, o.x.data(), in, o.w.data(), in, 0.0f, y.data(),
                      out);
    });
    const double igrad = seconds_per_call(world, lim, [&] {
      Operands& o = sets.next();
      for (const auto& [in, out] : shapes)
        kernels::gemm(false, false, M, in, out, 1.0f, o.dy.data(), out, o.w.data(), in, 0.0f,
                      dx.data(), in);
    });
    const double wgrad = seconds_per_call(world, lim, [&] {
      Operands& o = sets.next();
      for (const auto& [in, out] : shapes)
        kernels::gemm(true, false, out, in, M, 1.0f, o.dy.data(), out, o.x.data(), in, 1.0f,
                      o.dw.data(), in);
    });
    add_point(c, KernelKind::kGemmForward, static_cast<double>(C), flops / fwd);
    add_point(c, KernelKind::kGemmInputGrad, static_cast<double>(C), flops / igrad);
    add_point(c, KernelKind::kGemmWeightGrad, static_cast<double>(C), flops / wgrad);
  }
}

// Causal attention, 8 heads of 64, one sample of 128 .. 1024 tokens; and what the probabilities'
// dropout (p 0.1, Megatron's default) adds to a forward and a backward pass, per causal score.
template <typename T>
void measure_attention(comm::ProcessGroup& world, Curves& c, const Limits& lim) {
  constexpr int NH = 8, HD = 64;
  for (int64_t len = 128; len <= lim.length; len *= 2) {
    const Buffer<T> qkv = values<T>(len * 3 * NH * HD, 0.5f), dout = values<T>(len * NH * HD);
    Buffer<T> out(len * NH * HD), dqkv(qkv.size());
    Buffer<float> lse(NH * len);
    const double flops = 2.0 * len * len * HD * NH;
    // Seconds of a forward and of a backward pass with `dropout`.
    const auto passes = [&](const kernels::AttentionDropout& dropout) {
      const double fwd = seconds_per_call(world, lim, [&] {
        kernels::attention_forward(out.data(), lse.data(), qkv.data(), 1, len, NH, NH, HD, dropout);
      });
      const double bwd = seconds_per_call(world, lim, [&] {
        kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1,
                                    len, NH, NH, HD, dropout);
      });
      return std::pair{fwd, bwd};
    };
    const auto [fwd, bwd] = passes(kernels::AttentionDropout{});
    add_point(c, KernelKind::kAttentionForward, static_cast<double>(len), flops / fwd);
    add_point(c, KernelKind::kAttentionBackward, static_cast<double>(len), flops / bwd);
    kernels::AttentionDropout dropout;
    dropout.p = 0.1f;
    dropout.key = PhiloxKey{3, 4};
    const auto [fwd_dropout, bwd_dropout] = passes(dropout);
    // Two passes' masks over the causal scores; a difference lost in the timing noise is taken
    // as 1% of the passes (a rate must be positive).
    const double scores = 2.0 * NH * len * len / 2;
    const double extra = std::max(fwd_dropout + bwd_dropout - fwd - bwd, 0.01 * (fwd + bwd));
    add_point(c, KernelKind::kAttentionDropout, static_cast<double>(len), scores / extra);
  }
}

// The element-wise kernels at 2^16 .. 2^22 elements (rows of 1024 features).
template <typename T>
void measure_elementwise(comm::ProcessGroup& world, Curves& c, bool fp32, const Limits& lim) {
  constexpr int64_t C = 1024;
  for (int64_t n = int64_t{1} << 16; n <= lim.elements; n *= 4) {
    const int64_t N = n / C;
    const double size = static_cast<double>(n);
    const Buffer<T> weight = values<T>(C, 1.0f);
    // The activation kernels' operands rotate as the products' do (at most 64 copies: 32 MiB
    // for 16-bit values at 2^16 elements): in a step a norm, an activation, an add or a dropout
    // reads tensors written passes or kernels before.
    struct Operands {
      Buffer<T> a, b, out, out2;
    };
    RotatingOperands<Operands> sets(4 * n * static_cast<int64_t>(sizeof(T)), 1, [&] {
      return Operands{values<T>(n), values<T>(n), Buffer<T>(n), Buffer<T>(n)};
    });
    const Buffer<T>& b = sets.first().b;
    Buffer<T>& out = sets.first().out;
    Buffer<float> mean(N), rstd(N), dweight(C), dbias(C);
    const auto rate = [&](KernelKind kind, double amount, const std::function<void()>& run) {
      add_point(c, kind, size, amount / seconds_per_call(world, lim, run));
    };
    rate(KernelKind::kNormForward, size, [&] {
      Operands& o = sets.next();
      kernels::layer_norm_forward(o.out.data(), mean.data(), rstd.data(), o.a.data(), weight.data(),
                                  weight.data(), N, C, 1e-5f);
    });
    rate(KernelKind::kNormBackward, size, [&] {
      Operands& o = sets.next();
      kernels::layer_norm_backward(o.out2.data(), dweight.data(), dbias.data(), o.b.data(),
                                   o.a.data(), weight.data(), mean.data(), rstd.data(), N, C);
    });
    rate(KernelKind::kActivationForward, size, [&] {
      Operands& o = sets.next();
      kernels::gelu_forward(o.out.data(), o.a.data(), n);
    });
    rate(KernelKind::kActivationBackward, size, [&] {
      Operands& o = sets.next();
      kernels::gelu_backward(o.out2.data(), o.b.data(), o.a.data(), n);
    });
    rate(KernelKind::kAdd, size, [&] {
      Operands& o = sets.next();
      kernels::add(o.out.data(), o.a.data(), o.b.data(), n);
    });
    kernels::TokenCoords coords;
    coords.local_seq = coords.global_seq = N;
    rate(KernelKind::kDropout, size, [&] {
      Operands& o = sets.next();
      kernels::dropout_forward(o.out.data(), o.a.data(), PhiloxKey{1, 2}, coords, N, C, 0.1f);
    });
    // RoPE on q and k of 8 query and 8 key/value heads of 64 (the values untouched).
    {
      constexpr int H = 8, HD = 64;
      const int64_t tokens = n / (2 * H * HD);
      Buffer<T> qkv = values<T>(tokens * 3 * H * HD);
      Buffer<int32_t> pos(tokens);
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t);
      rate(KernelKind::kRope, size,
           [&] { kernels::rope_forward(qkv.data(), pos.data(), 1, tokens, H, H, HD, 10000.0f); });
    }
    // The lookup of token and position rows, then their gradients' scatter-add (one rate).
    {
      constexpr int64_t V = 8192;
      const Buffer<T> wte = values<T>(V * C), wpe = values<T>(N * C);
      Buffer<float> dwte(V * C), dwpe(N * C);
      Buffer<int32_t> tokens(N), pos(N);
      for (int64_t i = 0; i < N; ++i)
        tokens[i] = static_cast<int32_t>((i * 7919) % V), pos[i] = static_cast<int32_t>(i);
      const double f = seconds_per_call(world, lim, [&] {
        kernels::embedding_forward(out.data(), tokens.data(), pos.data(), wte.data(), wpe.data(), N,
                                   C, 0, V);
      });
      const double bw = seconds_per_call(world, lim, [&] {
        kernels::embedding_backward(dwte.data(), dwpe.data(), b.data(), tokens.data(), pos.data(),
                                    N, C, 0, V);
      });
      add_point(c, KernelKind::kEmbedding, size, 2.0 * size / (f + bw));
    }
    // Cross-entropy over rows of 8192 logits.
    {
      constexpr int64_t V = 8192;
      const int64_t rows = n / V;
      Buffer<T> logits = values<T>(n, 2.0f), dlogits(n);
      Buffer<float> losses(rows);
      Buffer<int32_t> targets(rows);
      for (int64_t i = 0; i < rows; ++i) targets[i] = static_cast<int32_t>((i * 31) % V);
      rate(KernelKind::kCrossEntropy, size, [&] {
        kernels::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(),
                                                targets.data(), nullptr, rows, V, V, 1.0f);
      });
    }
    // AdamW over fp32 master weights, writing the compute dtype's copy (none for fp32).
    {
      Buffer<float> master = values<float>(n), m(n, 0.0f), v(n, 0.0f), grad = values<float>(n);
      rate(KernelKind::kOptimizer, size, [&] {
        kernels::adamw_step(master.data(), m.data(), v.data(), fp32 ? nullptr : out.data(),
                            grad.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
      });
      if (fp32) {
        double sink = 0;
        rate(KernelKind::kGradNorm, size, [&] { sink += kernels::sum_squares(grad.data(), n); });
        rate(KernelKind::kZeroFill, size,
             [&] { std::memset(grad.data(), 0, static_cast<size_t>(n) * sizeof(float)); });
        if (sink < 0) std::abort();  // keeps the sums from being optimised away
      }
    }
  }
}

template <typename T>
Curves measure_kernels(comm::ProcessGroup& world, bool fp32, const Limits& lim) {
  Curves c;
  measure_gemms<T>(world, c, lim);
  measure_attention<T>(world, c, lim);
  measure_elementwise<T>(world, c, fp32, lim);
  return c;
}

// Latency and bus bandwidth of each collective over `world`, from 64 KiB .. 64 MiB: the slope of
// time over the ring's bytes (LinkRate::seconds) by least squares, the latency what the smallest
// size takes beyond it.
Links measure_collectives(comm::ProcessGroup& world, const Limits& lim) {
  Links links;
  const int n = world.size();
  if (n < 2) return links;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (kind == CollectiveKind::kSendRecv && n % 2 != 0) continue;
    std::vector<double> xs, ts;
    for (int64_t bytes = int64_t{1} << 16; bytes <= lim.bytes; bytes *= 4) {
      // A whole number of parts on every rank (any group size).
      const int64_t count = bytes / 4 / n * n;
      Tensor whole = Tensor::zeros({count}, DType::kF32);
      Tensor part = Tensor::zeros({count / n}, DType::kF32);
      const int peer = world.rank() ^ 1;
      // Fixed call counts (the same on every rank, as collectives need).
      const int calls = static_cast<int>(std::clamp<int64_t>((int64_t{16} << 20) / bytes, 3, 100));
      std::function<void()> run;
      switch (kind) {
        case CollectiveKind::kAllReduce:
          run = [&] { world.all_reduce(whole, comm::ReduceOp::kSum).wait(); };
          break;
        case CollectiveKind::kReduceScatter:
          run = [&] { world.reduce_scatter(whole, part, comm::ReduceOp::kSum).wait(); };
          break;
        case CollectiveKind::kAllGather:
          run = [&] { world.all_gather(part, whole).wait(); };
          break;
        default:  // one message each way between pairs of ranks: half the round trip
          run = [&] {
            if (world.rank() % 2 == 0) {
              world.send(whole, peer).wait();
              world.recv(whole, peer).wait();
            } else {
              world.recv(whole, peer).wait();
              world.send(whole, peer).wait();
            }
          };
          break;
      }
      const double round_trips = kind == CollectiveKind::kSendRecv ? 2 : 1;
      LinkRate unit{0, 1};  // seconds(bytes) with latency 0 and rate 1: the ring's bytes
      xs.push_back(unit.seconds(kind, static_cast<double>(count * 4), n));
      ts.push_back(seconds_per_fixed_calls(world, run, calls, 3) / round_trips);
    }
    double mx = 0, mt = 0;
    for (size_t i = 0; i < xs.size(); ++i) mx += xs[i], mt += ts[i];
    mx /= xs.size(), mt /= ts.size();
    double sxx = 0, sxt = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      sxx += (xs[i] - mx) * (xs[i] - mx), sxt += (xs[i] - mx) * (ts[i] - mt);
    const double slope = sxt > 0 ? sxt / sxx : ts.back() / xs.back();
    const int steps = kind == CollectiveKind::kSendRecv ? 1 : n - 1;
    links[k].bus_bytes_per_s = 1.0 / slope;
    links[k].latency_s = std::max(0.0, ts.front() - xs.front() * slope) / steps;
  }
  return links;
}

// The extra cost of accumulating into memory whose pages were given back (madvise MADV_DONTNEED,
// as ZeRO 2-3 do with unowned gradient parts, which backward's weight-gradient products then
// read and write: a fault mapping the zero page, another replacing it, and the zeroing), beyond
// the same pass over resident pages.
void measure_page_refault(comm::ProcessGroup& world, Curves& c, const Limits& lim) {
  for (size_t bytes : {static_cast<size_t>(lim.bytes >> 4), static_cast<size_t>(lim.bytes)}) {
    float* f = static_cast<float*>(std::aligned_alloc(4096, bytes));
    TESSERA_CHECK_MSG(f != nullptr, "out of memory for the page re-fault benchmark");
    const size_t n = bytes / sizeof(float);
    std::fill(f, f + n, 1.0f);
    const auto accumulate = [&] {
      for (size_t i = 0; i < n; ++i) f[i] += 1.0f;
    };
    const double resident = seconds_per_call(world, lim, accumulate);
    const double refault = seconds_per_call(world, lim, [&] {
      madvise(f, bytes, MADV_DONTNEED);
      accumulate();
    });
    std::free(f);
    const double extra = std::max(refault - resident, 1e-3 * refault);
    add_point(c, KernelKind::kPageRefault, static_cast<double>(bytes), bytes / extra);
  }
}

// The share of a collective on the communication thread that compute running meanwhile hides: a
// 16 MiB all-reduce alone, a run of small products about as long, then the all-reduce issued and
// the products run before waiting for it: (alone + alone - together) / all-reduce alone, clamped
// to [0, 1]. The products are sized to the all-reduce so that neither dominates the difference
// (a product much longer than the collective would make its noise the answer).
double measure_overlap(comm::ProcessGroup& world, const Limits& lim) {
  constexpr int64_t D = 256;
  const Buffer<float> a = values<float>(D * D), b = values<float>(D * D);
  Buffer<float> out(D * D);
  Tensor buffer = Tensor::zeros({int64_t{4} << 20}, DType::kF32);
  const auto timed = [&](const std::function<void()>& run) {
    return seconds_per_fixed_calls(world, run, 5, 5);
  };
  const double reduce = timed([&] { world.all_reduce(buffer, comm::ReduceOp::kSum).wait(); });
  const double one = seconds_per_call(world, lim, [&] {
    kernels::gemm(false, false, D, D, D, 1.0f, a.data(), D, b.data(), D, 0.0f, out.data(), D);
  });
  const int repeats = static_cast<int>(std::clamp(reduce / one, 1.0, 10000.0));
  const auto products = [&] {
    for (int i = 0; i < repeats; ++i)
      kernels::gemm(false, false, D, D, D, 1.0f, a.data(), D, b.data(), D, 0.0f, out.data(), D);
  };
  const double compute = timed(products);
  const double both = timed([&] {
    comm::Work w = world.all_reduce(buffer, comm::ReduceOp::kSum);
    products();
    w.wait();
  });
  return std::clamp((compute + reduce - both) / reduce, 0.0, 1.0);
}

}  // namespace

HostConfiguration calibrate_host(comm::ProcessGroup& world, int threads,
                                 const std::vector<DType>& dtypes, bool quick) {
  const Limits lim = quick ? Limits{128, 128, int64_t{1} << 16, int64_t{1} << 20, 0.005}
                           : Limits{1024, 1024, int64_t{1} << 22, int64_t{1} << 26, 0.04};
  const int previous = num_threads();
  set_num_threads(threads);
  HostConfiguration c;
  c.ranks_per_host = world.size();
  c.threads_per_rank = threads;
  c.kernels[DType::kF32] = measure_kernels<float>(world, true, lim);
  for (DType d : dtypes) {
    if (d == DType::kBF16) c.kernels[d] = measure_kernels<bf16>(world, false, lim);
    if (d == DType::kF16) c.kernels[d] = measure_kernels<fp16>(world, false, lim);
  }
  measure_page_refault(world, c.kernels[DType::kF32], lim);
  // After the kernels, as in a training step: their code is resident, MPI has set up its buffers
  // to the other ranks (the barriers), the operands are back in the page pool. Before the
  // collectives, whose temporaries (up to 64 MiB, MPI's own, on the heap) leave free chunks
  // whose pages may not be resident: the baseline subtracts the heap's free bytes.
  c.resident_baseline_bytes = static_cast<double>(process_baseline_bytes());
  c.intra_host = measure_collectives(world, lim);
  if (world.size() > 1) c.intra_host.overlap = measure_overlap(world, lim);
  set_num_threads(previous);
  return c;
}

}  // namespace tessera::plan
