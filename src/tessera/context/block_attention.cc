#include "tessera/context/block_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "tessera/core/clock.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/attention_block.h"
#include "tessera/kernels/attention_merge.h"

namespace tessera::context {
namespace {

constexpr int kKvTag = 7101;   // the key/value blocks going round
constexpr int kDkvTag = 7102;  // their gradient accumulators

// The key and value columns of this rank's packed qkv: (B * T_local, 2 KV HD), keys then values.
Tensor take_kv(const Tensor& qkv, const BlockAttentionShape& s) {
  const int64_t rows = s.B * s.T_local, W = qkv.dim(1), q_cols = int64_t{s.NH} * s.HD;
  const int64_t kv_cols = 2 * int64_t{s.KV} * s.HD;
  const size_t es = dtype_size(qkv.dtype());
  Tensor kv = Tensor::empty({rows, kv_cols}, qkv.dtype(), MemoryCategory::kComm);
  const auto* src = static_cast<const char*>(qkv.raw());
  auto* dst = static_cast<char*>(kv.raw());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * kv_cols * es, src + (r * W + q_cols) * es, kv_cols * es);
  return kv;
}

// Query-key pairs with key position <= query position, c queries from qp and c keys from kp.
int64_t causal_pairs(int64_t qp, int64_t kp, int64_t c) {
  int64_t n = 0;
  for (int64_t i = 0; i < c; ++i) n += std::clamp<int64_t>(qp + i - kp + 1, 0, c);
  return n;
}

// The block of this rank's query chunk at row qs * c (position qp) against a key chunk at
// position kp.
kernels::AttentionBlock block_of(const BlockAttentionShape& s, int64_t c, int qs, int64_t qp,
                                 int64_t kp) {
  const int64_t W = (int64_t{s.NH} + 2 * s.KV) * s.HD, O = int64_t{s.NH} * s.HD;
  const int64_t kvW = 2 * int64_t{s.KV} * s.HD;
  kernels::AttentionBlock a;
  a.B = s.B;
  a.q_len = a.k_len = c;
  a.q_pos = qp;
  a.k_pos = kp;
  a.seq = s.seq;
  a.NH = s.NH;
  a.KV = s.KV;
  a.HD = s.HD;
  a.q_sample = s.T_local * W;
  a.q_ld = W;
  a.o_sample = s.T_local * O;
  a.o_ld = O;
  a.kv_sample = s.T_local * kvW;
  a.kv_ld = kvW;
  a.lse_ld = s.T_local;
  if (s.doc_start != nullptr) {
    a.doc_start = s.doc_start + qs * c;
    a.doc_sample = s.T_local;
  }
  return a;
}

// Merges a block's (o, lse) for query rows [row0, row0 + c) into the running (acc, L).
void merge(float* acc, float* L, const float* o, const float* lse, const BlockAttentionShape& s,
           int64_t row0, int64_t c) {
  kernels::attention_merge(acc, L, o, lse, s.B, s.T_local, s.NH, s.HD, row0, c);
}

// Every pair of a query chunk of this rank (row qs * c, position q_pos[qs]) and a key chunk of
// a block (row ks * c, position k_pos[ks]) in which some key is visible: fn(block, qs, ks).
// Adds the pairs' causal query-key pairs to `pairs`.
template <typename Fn>
void each_pair(const BlockAttentionShape& s, int64_t c, const std::vector<int64_t>& q_pos,
               const std::vector<int64_t>& k_pos, int64_t& pairs, Fn fn) {
  for (int qs = 0; qs < static_cast<int>(q_pos.size()); ++qs)
    for (int ks = 0; ks < static_cast<int>(k_pos.size()); ++ks) {
      if (k_pos[ks] > q_pos[qs] + c - 1) continue;  // every key after every query
      pairs += s.B * s.NH * causal_pairs(q_pos[qs], k_pos[ks], c);
      fn(block_of(s, c, qs, q_pos[qs], k_pos[ks]), qs, ks);
    }
}

}  // namespace

BlockAttention::BlockAttention(std::shared_ptr<comm::ProcessGroup> group, CommType type)
    : group_(std::move(group)), type_(type) {
  TESSERA_CHECK(group_ && group_->size() > 1);
  TESSERA_CHECK(type_ == CommType::kP2P || type_ == CommType::kAllGather);
  cp_size_ = group_->size();
  for (int m = 0; m < cp_size_; ++m) members_.push_back({m});
}

BlockAttention::BlockAttention(std::shared_ptr<comm::ProcessGroup> ring, int cp_size,
                               std::vector<std::vector<int>> members)
    : group_(std::move(ring)),
      type_(CommType::kP2P),
      cp_size_(cp_size),
      members_(std::move(members)) {
  TESSERA_CHECK(group_ && static_cast<int>(members_.size()) == group_->size());
}

std::vector<int64_t> BlockAttention::chunk_positions(int m, int64_t seq) const {
  std::vector<int64_t> pos;
  for (int rank : members_[m]) {
    const SequenceSplit split{cp_size_, rank};
    pos.push_back(split.global(0, seq));
    pos.push_back(split.global(split.chunk(seq), seq));
  }
  return pos;
}

void BlockAttention::wait(comm::Work& a, comm::Work& b) const {
  const Clock::time_point t0 = Clock::now();
  a.wait();
  b.wait();
  comm_seconds_ += seconds_since(t0);
}

void BlockAttention::each_block(const Tensor& mine,
                                const std::function<void(const Tensor&, int)>& attend,
                                const std::function<void()>& after_step) const {
  const int N = group_->size(), r = group_->rank();
  if (type_ == CommType::kAllGather) {
    Tensor all = Tensor::empty({N * mine.dim(0), mine.dim(1)}, mine.dtype(), MemoryCategory::kComm);
    comm::Work gathered = group_->all_gather(mine, all), none;
    wait(gathered, none);
    for (int h = 0; h < N; ++h) attend(all.slice_rows(h * mine.dim(0), (h + 1) * mine.dim(0)), h);
    return;
  }
  // The ring: at step s this rank holds the block of rank r - s, and passes it on to r + 1
  // while computing with it; the receive goes to the other buffer, whose send has completed.
  Tensor cur = mine, next = Tensor::empty(mine.shape(), mine.dtype(), MemoryCategory::kComm);
  for (int step = 0; step < N; ++step) {
    comm::Work sent, received;
    if (step + 1 < N) {
      sent = group_->send(cur, (r + 1) % N, kKvTag);
      received = group_->recv(next, (r + N - 1) % N, kKvTag);
    }
    attend(cur, (r + N - step) % N);
    if (after_step) after_step();
    if (step + 1 < N) {
      wait(sent, received);
      std::swap(cur, next);
    }
  }
}

void BlockAttention::forward(Tensor& attn, Tensor& lse, const Tensor& qkv,
                             const BlockAttentionShape& s) const {
  const int64_t c = s.seq / (2 * cp_size_), O = int64_t{s.NH} * s.HD;
  const std::vector<int64_t> q_pos = chunk_positions(group_->rank(), s.seq);
  TESSERA_CHECK(qkv.dim(0) == s.B * s.T_local &&
                s.T_local == static_cast<int64_t>(q_pos.size()) * c);
  Tensor acc = Tensor::zeros({s.B * s.T_local, O}, DType::kF32);
  lse = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  std::fill(lse.data<float>(), lse.data<float>() + lse.numel(),
            -std::numeric_limits<float>::infinity());
  Tensor ob = Tensor::empty({s.B * s.T_local, O}, DType::kF32);
  Tensor lb = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  // This rank's queries against the block of `holder` (kv: its keys and values), merged.
  auto attend = [&](const Tensor& kv, int holder) {
    visit_float(qkv.dtype(), [&](auto tag) {
      using F = decltype(tag);
      const int64_t kvW = kv.dim(1);
      each_pair(s, c, q_pos, chunk_positions(holder, s.seq), pairs_,
                [&](const kernels::AttentionBlock& a, int qs, int ks) {
                  const F* k = kv.data<F>() + ks * c * kvW;
                  kernels::attention_block_forward(ob.data<float>() + qs * c * O,
                                                   lb.data<float>() + qs * c,
                                                   qkv.data<F>() + qs * c * qkv.dim(1), k,
                                                   k + int64_t{s.KV} * s.HD, a, s.dropout);
                  merge(acc.data<float>(), lse.data<float>(), ob.data<float>(), lb.data<float>(), s,
                        qs * c, c);
                });
    });
  };
  each_block(take_kv(qkv, s), attend, nullptr);
  attn = acc.to(qkv.dtype(), MemoryCategory::kActivations);
}

namespace {

// delta (B, NH, T_local) = rowsum(dO * O) of every (sample, head, query).
Tensor row_dots(const Tensor& dattn, const Tensor& attn, const BlockAttentionShape& s) {
  const int64_t O = int64_t{s.NH} * s.HD;
  Tensor delta = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  visit_float(attn.dtype(), [&](auto tag) {
    using F = decltype(tag);
    const F* dout = dattn.data<F>();
    const F* out = attn.data<F>();
    for (int64_t b = 0; b < s.B; ++b)
      for (int h = 0; h < s.NH; ++h)
        for (int64_t t = 0; t < s.T_local; ++t) {
          float acc = 0.0f;
          const int64_t base = (b * s.T_local + t) * O + int64_t{h} * s.HD;
          for (int d = 0; d < s.HD; ++d) acc += to_f32(dout[base + d]) * to_f32(out[base + d]);
          delta.data<float>()[(b * s.NH + h) * s.T_local + t] = acc;
        }
  });
  return delta;
}

// dqkv (rows, W) in `dtype` = [dq | dk dv] per row, from fp32 dq (rows, O) and dkv (rows, 2 KV HD).
Tensor pack_dqkv(const Tensor& dq, const Tensor& dkv, DType dtype) {
  const int64_t rows = dq.dim(0), O = dq.dim(1), kvW = dkv.dim(1), W = O + kvW;
  Tensor dqkv = Tensor::empty({rows, W}, dtype);
  visit_float(dtype, [&](auto tag) {
    using F = decltype(tag);
    F* out = dqkv.data<F>();
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < O; ++j) out[row * W + j] = from_f32<F>(dq.data<float>()[row * O + j]);
      for (int64_t j = 0; j < kvW; ++j)
        out[row * W + O + j] = from_f32<F>(dkv.data<float>()[row * kvW + j]);
    }
  });
  return dqkv;
}

}  // namespace

Tensor BlockAttention::backward(const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                                const Tensor& lse, const BlockAttentionShape& s) const {
  const int N = group_->size(), r = group_->rank();
  const int64_t c = s.seq / (2 * cp_size_), O = int64_t{s.NH} * s.HD;
  const int64_t rows = s.B * s.T_local;
  const std::vector<int64_t> q_pos = chunk_positions(r, s.seq);
  const Tensor delta = row_dots(dattn, attn, s);
  const Tensor mine = take_kv(qkv, s);
  const int64_t kvW = mine.dim(1), KVHD = int64_t{s.KV} * s.HD;
  Tensor dq = Tensor::zeros({rows, O}, DType::kF32);
  // The dK/dV accumulator of the block in hand: all_gather keeps one per block (reduce-scattered
  // at the end); the ring passes the block's along with it, home after N steps.
  Tensor dall, dcur, dnext;
  if (type_ == CommType::kAllGather) {
    dall = Tensor::zeros({N * rows, kvW}, DType::kF32, MemoryCategory::kComm);
  } else {
    dcur = Tensor::zeros({rows, kvW}, DType::kF32, MemoryCategory::kComm);
    dnext = Tensor::empty({rows, kvW}, DType::kF32, MemoryCategory::kComm);
  }
  auto attend = [&](const Tensor& kv, int holder) {
    Tensor dkv = dall.defined() ? dall.slice_rows(holder * rows, (holder + 1) * rows) : dcur;
    visit_float(qkv.dtype(), [&](auto tag) {
      using F = decltype(tag);
      each_pair(s, c, q_pos, chunk_positions(holder, s.seq), pairs_,
                [&](const kernels::AttentionBlock& a, int qs, int ks) {
                  const F* k = kv.data<F>() + ks * c * kvW;
                  float* dk = dkv.data<float>() + ks * c * kvW;
                  kernels::attention_block_backward(
                      dq.data<float>() + qs * c * O, dk, dk + KVHD, dattn.data<F>() + qs * c * O,
                      qkv.data<F>() + qs * c * qkv.dim(1), k, k + KVHD, lse.data<float>() + qs * c,
                      delta.data<float>() + qs * c, a, s.dropout);
                });
    });
  };
  // Ring: after each step the accumulator moves on to r + 1 (after the last, to its owner).
  auto pass_gradient = [&] {
    if (N == 1) return;  // a ring of one (a2a+p2p with one group): the block is this rank's
    comm::Work sent = group_->send(dcur, (r + 1) % N, kDkvTag);
    comm::Work received = group_->recv(dnext, (r + N - 1) % N, kDkvTag);
    wait(sent, received);
    std::swap(dcur, dnext);
  };
  if (type_ == CommType::kAllGather) {
    each_block(mine, attend, nullptr);
    dcur = Tensor::empty({rows, kvW}, DType::kF32, MemoryCategory::kComm);
    comm::Work scattered = group_->reduce_scatter(dall, dcur, comm::ReduceOp::kSum), none;
    wait(scattered, none);
  } else {
    each_block(mine, attend, pass_gradient);
  }
  return pack_dqkv(dq, dcur, qkv.dtype());
}

}  // namespace tessera::context
