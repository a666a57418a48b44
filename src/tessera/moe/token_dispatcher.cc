#include "tessera/moe/token_dispatcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::moe {
namespace {

std::atomic<int64_t> exchange_ns{0};

// Adds the lifetime of the object to exchange_seconds().
struct ExchangeClock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~ExchangeClock() {
    exchange_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  }
};

// Copies row blocks from `src` to `dst` (C features of `bytes_per_row`), block (q, e) of
// counts[q*El + e] rows: source-major in `src` when `to_expert_major`, expert-major in `dst`;
// the reverse otherwise.
void reorder(const DispatchPlan& plan, const unsigned char* src, unsigned char* dst,
             size_t row_bytes, bool to_expert_major) {
  const int P = plan.ep_size, El = plan.local_experts;
  // Offsets of each block in source-major and in expert-major order.
  std::vector<int64_t> by_source(P * El), by_expert(P * El);
  int64_t at = 0;
  for (int q = 0; q < P; ++q)
    for (int e = 0; e < El; ++e) by_source[q * El + e] = at, at += plan.recv_counts[q * El + e];
  at = 0;
  for (int e = 0; e < El; ++e)
    for (int q = 0; q < P; ++q) by_expert[q * El + e] = at, at += plan.recv_counts[q * El + e];
  for (int b = 0; b < P * El; ++b) {
    const int64_t from = to_expert_major ? by_source[b] : by_expert[b];
    const int64_t to = to_expert_major ? by_expert[b] : by_source[b];
    std::memcpy(dst + to * row_bytes, src + from * row_bytes, plan.recv_counts[b] * row_bytes);
  }
}

std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t C) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * C;
  return out;
}

}  // namespace

DispatchPlan make_dispatch_plan(const Permutation& p, int num_experts, comm::ProcessGroup& ep,
                                DispatcherType type) {
  DispatchPlan plan;
  plan.type = type;
  plan.ep_size = ep.size();
  plan.ep_rank = ep.rank();
  TESSERA_CHECK(num_experts % plan.ep_size == 0);
  const int P = plan.ep_size, E = num_experts, El = E / P;
  plan.local_experts = El;
  Tensor mine = Tensor::empty({static_cast<int64_t>(E)}, DType::kI64, MemoryCategory::kComm);
  for (int e = 0; e < E; ++e) mine.data<int64_t>()[e] = p.expert_begin[e + 1] - p.expert_begin[e];
  Tensor all = Tensor::empty({static_cast<int64_t>(P) * E}, DType::kI64, MemoryCategory::kComm);
  ep.all_gather(mine, all).wait();
  plan.counts.assign(all.data<int64_t>(), all.data<int64_t>() + P * E);
  plan.send_rows.assign(P, 0);
  plan.recv_rows.assign(P, 0);
  plan.recv_counts.assign(P * El, 0);
  plan.expert_begin.assign(El + 1, 0);
  for (int q = 0; q < P; ++q) {
    plan.send_rows[q] = p.expert_begin[(q + 1) * El] - p.expert_begin[q * El];
    for (int e = 0; e < El; ++e) {
      const int64_t n = plan.counts[q * E + plan.ep_rank * El + e];
      plan.recv_counts[q * El + e] = n;
      plan.recv_rows[q] += n;
      plan.expert_begin[e + 1] += n;
    }
  }
  for (int e = 0; e < El; ++e) plan.expert_begin[e + 1] += plan.expert_begin[e];
  return plan;
}

namespace {

// All-gather dispatcher helpers. Rows of rank q (its expert-major permutation) total
// rows_of(q); rank p's local-expert rows total local_rows_of(p).
int64_t rows_of(const DispatchPlan& plan, int q) {
  const int E = plan.ep_size * plan.local_experts;
  int64_t n = 0;
  for (int e = 0; e < E; ++e) n += plan.counts[q * E + e];
  return n;
}
int64_t local_rows_of(const DispatchPlan& plan, int p) {
  const int E = plan.ep_size * plan.local_experts, El = plan.local_experts;
  int64_t n = 0;
  for (int q = 0; q < plan.ep_size; ++q)
    for (int e = 0; e < El; ++e) n += plan.counts[q * E + p * El + e];
  return n;
}

// Every rank's `t` (its first `rows_of(q)` rows), padded to the longest, gathered: block q of
// the result, `stride` rows each, is rank q's.
Tensor gather_padded(const Tensor& t, int64_t stride, comm::ProcessGroup& ep) {
  const int64_t C = t.dim(1);
  const size_t row_bytes = C * dtype_size(t.dtype());
  Tensor padded = Tensor::zeros({stride, C}, t.dtype(), MemoryCategory::kComm);
  std::memcpy(padded.raw(), t.raw(), t.dim(0) * row_bytes);
  Tensor all = Tensor::empty({stride * ep.size(), C}, t.dtype(), MemoryCategory::kComm);
  ep.all_gather(padded, all).wait();
  return all;
}

Tensor dispatch_allgather(const Tensor& rows, const DispatchPlan& plan, comm::ProcessGroup& ep) {
  const int P = plan.ep_size, El = plan.local_experts, E = P * El;
  int64_t stride = 0;
  for (int q = 0; q < P; ++q) stride = std::max(stride, rows_of(plan, q));
  const Tensor all = gather_padded(rows, stride, ep);
  const int64_t C = rows.dim(1);
  const size_t row_bytes = C * dtype_size(rows.dtype());
  Tensor out = Tensor::empty({plan.local_rows(), C}, rows.dtype());
  int64_t at = 0;
  for (int e = 0; e < El; ++e)
    for (int q = 0; q < P; ++q) {  // rank q's rows of expert (my first + e) within its block
      const int global = plan.ep_rank * El + e;
      int64_t from = 0;
      for (int f = 0; f < global; ++f) from += plan.counts[q * E + f];
      const int64_t n = plan.counts[q * E + global];
      std::memcpy(static_cast<unsigned char*>(out.raw()) + at * row_bytes,
                  static_cast<const unsigned char*>(all.raw()) + (q * stride + from) * row_bytes,
                  n * row_bytes);
      at += n;
    }
  return out;
}

Tensor combine_allgather(const Tensor& expert_rows, const DispatchPlan& plan,
                         comm::ProcessGroup& ep) {
  const int P = plan.ep_size, El = plan.local_experts, E = P * El, me = plan.ep_rank;
  int64_t stride = 0;
  for (int p = 0; p < P; ++p) stride = std::max(stride, local_rows_of(plan, p));
  const Tensor all = gather_padded(expert_rows, stride, ep);
  const int64_t C = expert_rows.dim(1);
  const size_t row_bytes = C * dtype_size(expert_rows.dtype());
  Tensor out = Tensor::empty({rows_of(plan, me), C}, expert_rows.dtype());
  int64_t at = 0;  // my rows, expert-major
  for (int e = 0; e < E; ++e) {
    const int p = e / El, el = e % El;
    // Within rank p's outputs (expert-major, sources in rank order): expert el's block, then
    // the rows of sources before me.
    int64_t from = 0;
    for (int f = 0; f < el; ++f)
      for (int q = 0; q < P; ++q) from += plan.counts[q * E + p * El + f];
    for (int q = 0; q < me; ++q) from += plan.counts[q * E + e];
    const int64_t n = plan.counts[me * E + e];
    std::memcpy(static_cast<unsigned char*>(out.raw()) + at * row_bytes,
                static_cast<const unsigned char*>(all.raw()) + (p * stride + from) * row_bytes,
                n * row_bytes);
    at += n;
  }
  return out;
}

}  // namespace

double exchange_seconds() { return static_cast<double>(exchange_ns.load()) * 1e-9; }

Tensor dispatch(const Tensor& rows, const DispatchPlan& plan, comm::ProcessGroup& ep) {
  const ExchangeClock clock;
  if (plan.type == DispatcherType::kAllGather) return dispatch_allgather(rows, plan, ep);
  const int64_t C = rows.dim(1);
  Tensor received = Tensor::empty({plan.local_rows(), C}, rows.dtype());
  ep.all_to_allv(rows, times(plan.send_rows, C), received, times(plan.recv_rows, C)).wait();
  Tensor out = Tensor::empty({plan.local_rows(), C}, rows.dtype());
  reorder(plan, static_cast<const unsigned char*>(received.raw()),
          static_cast<unsigned char*>(out.raw()), C * dtype_size(rows.dtype()), true);
  return out;
}

Tensor combine(const Tensor& expert_rows, const DispatchPlan& plan, comm::ProcessGroup& ep) {
  const ExchangeClock clock;
  if (plan.type == DispatcherType::kAllGather) return combine_allgather(expert_rows, plan, ep);
  const int64_t C = expert_rows.dim(1);
  Tensor by_source = Tensor::empty({plan.local_rows(), C}, expert_rows.dtype());
  reorder(plan, static_cast<const unsigned char*>(expert_rows.raw()),
          static_cast<unsigned char*>(by_source.raw()), C * dtype_size(expert_rows.dtype()), false);
  const int64_t back = std::accumulate(plan.send_rows.begin(), plan.send_rows.end(), int64_t{0});
  Tensor out = Tensor::empty({back, C}, expert_rows.dtype());
  ep.all_to_allv(by_source, times(plan.recv_rows, C), out, times(plan.send_rows, C)).wait();
  return out;
}

int64_t dispatch_elements(const DispatchPlan& plan, int64_t C) {
  return C * std::accumulate(plan.send_rows.begin(), plan.send_rows.end(), int64_t{0});
}

}  // namespace tessera::moe
