#include "tessera/context/head_exchange.h"

#include <cstring>
#include <string>

#include "tessera/core/clock.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/sequence_split.h"

namespace tessera::context {
namespace {

int64_t ranges_width(const std::vector<std::pair<int64_t, int64_t>>& r) {
  int64_t w = 0;
  for (const auto& [begin, end] : r) w += end - begin;
  return w;
}

// The head-split row (within a sample of T) of member s's local token u: its position in the
// sequence, or (members concatenated) s * T / N + u.
int64_t row_of(int N, int s, int64_t u, int64_t T, bool in_order) {
  return in_order ? SequenceSplit{N, s}.global(u, T) : s * (T / N) + u;
}

HeadColumns finish(HeadColumns c) {
  c.heads_width = ranges_width(c.ranges.front());
  for (const auto& r : c.ranges) TESSERA_CHECK(ranges_width(r) == c.heads_width);
  return c;
}

}  // namespace

HeadColumns qkv_columns(int NH, int KV, int HD, int N) {
  if (NH % N != 0)
    throw Error("context parallel all-to-all: " + std::to_string(NH) +
                " query heads per tensor-parallel rank do not split over " + std::to_string(N) +
                " context-parallel ranks");
  if (KV % N != 0 && N % KV != 0)
    throw Error("context parallel all-to-all: " + std::to_string(KV) +
                " key/value groups per tensor-parallel rank neither split over nor divide " +
                std::to_string(N) + " context-parallel ranks");
  HeadColumns c;
  c.width = (int64_t{NH} + 2 * KV) * HD;
  const int64_t heads = NH / N, group = NH / KV;
  for (int d = 0; d < N; ++d) {
    std::vector<std::pair<int64_t, int64_t>> r;
    r.emplace_back(d * heads * HD, (d + 1) * heads * HD);
    // The key/value groups rank d's query heads read: [first, end).
    const int64_t first = KV % N == 0 ? int64_t{d} * (KV / N) : d * heads / group;
    const int64_t end = KV % N == 0 ? first + KV / N : first + 1;
    for (int64_t base : {int64_t{NH}, int64_t{NH} + KV})
      r.emplace_back((base + first) * HD, (base + end) * HD);
    c.ranges.push_back(std::move(r));
  }
  return finish(std::move(c));
}

HeadColumns head_columns(int NH, int HD, int N) {
  TESSERA_CHECK(NH % N == 0);
  HeadColumns c;
  c.width = int64_t{NH} * HD;
  const int64_t heads = NH / N;
  for (int d = 0; d < N; ++d) c.ranges.push_back({{d * heads * HD, (d + 1) * heads * HD}});
  return finish(std::move(c));
}

void HeadExchange::exchange(const Tensor& send, Tensor& recv) const {
  const Clock::time_point t0 = Clock::now();
  group_->all_to_all(send, recv).wait();
  comm_seconds_ += seconds_since(t0);
}

Tensor HeadExchange::to_heads(const Tensor& x, int64_t B, const HeadColumns& cols,
                              bool in_order) const {
  const int N = group_ ? group_->size() : 1;
  TESSERA_CHECK(static_cast<int>(cols.ranges.size()) == N && x.ndim() == 2 &&
                x.dim(1) == cols.width && x.dim(0) % B == 0);
  const int64_t T_local = x.dim(0) / B, T = T_local * N, w = cols.heads_width;
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw());
  // Block d of the send buffer: rank d's columns of this rank's rows, (B * T_local, w).
  Tensor send = Tensor::empty({N * B * T_local, w}, x.dtype(), MemoryCategory::kComm);
  auto* dst = static_cast<char*>(send.raw());
  for (int d = 0; d < N; ++d)
    for (int64_t row = 0; row < B * T_local; ++row) {
      char* out = dst + ((d * B * T_local + row) * w) * es;
      for (const auto& [begin, end] : cols.ranges[d]) {
        std::memcpy(out, src + (row * cols.width + begin) * es, (end - begin) * es);
        out += (end - begin) * es;
      }
    }
  Tensor recv = Tensor::empty({N * B * T_local, w}, x.dtype(), MemoryCategory::kComm);
  if (N > 1)
    exchange(send, recv);
  else
    recv = send;
  // Block s holds rank s's tokens: put each at its place in the sequence.
  Tensor out = Tensor::empty({B * T, w}, x.dtype());
  const auto* in = static_cast<const char*>(recv.raw());
  auto* o = static_cast<char*>(out.raw());
  for (int s = 0; s < N; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t u = 0; u < T_local; ++u)
        std::memcpy(o + ((b * T + row_of(N, s, u, T, in_order)) * w) * es,
                    in + (((s * B + b) * T_local + u) * w) * es, w * es);
  return out;
}

Tensor HeadExchange::to_sequence(const Tensor& y, int64_t B, const HeadColumns& cols,
                                 bool in_order) const {
  const int N = group_ ? group_->size() : 1;
  TESSERA_CHECK(static_cast<int>(cols.ranges.size()) == N && y.ndim() == 2 &&
                y.dim(1) == cols.heads_width && y.dim(0) % (B * N) == 0);
  const int64_t T = y.dim(0) / B, T_local = T / N, w = cols.heads_width;
  const size_t es = dtype_size(y.dtype());
  // Block s of the send buffer: rank s's tokens, (B * T_local, w).
  Tensor send = Tensor::empty({N * B * T_local, w}, y.dtype(), MemoryCategory::kComm);
  const auto* in = static_cast<const char*>(y.raw());
  auto* dst = static_cast<char*>(send.raw());
  for (int s = 0; s < N; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t u = 0; u < T_local; ++u)
        std::memcpy(dst + (((s * B + b) * T_local + u) * w) * es,
                    in + ((b * T + row_of(N, s, u, T, in_order)) * w) * es, w * es);
  Tensor recv = Tensor::empty({N * B * T_local, w}, y.dtype(), MemoryCategory::kComm);
  if (N > 1)
    exchange(send, recv);
  else
    recv = send;
  // Block d holds rank d's columns of this rank's tokens; shared columns add up in rank order.
  const int64_t rows = B * T_local;
  std::vector<float> acc(static_cast<size_t>(rows * cols.width), 0.0f);
  Tensor out = Tensor::empty({rows, cols.width}, y.dtype());
  visit_float(y.dtype(), [&](auto tag) {
    using F = decltype(tag);
    const F* r = recv.data<F>();
    for (int d = 0; d < N; ++d)
      for (int64_t row = 0; row < rows; ++row) {
        const F* piece = r + (d * rows + row) * w;
        for (const auto& [begin, end] : cols.ranges[d])
          for (int64_t c = begin; c < end; ++c) acc[row * cols.width + c] += to_f32(*piece++);
      }
    F* o = out.data<F>();
    for (size_t i = 0; i < acc.size(); ++i) o[i] = from_f32<F>(acc[i]);
  });
  return out;
}

}  // namespace tessera::context
