#include "tessera/context/block_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tessera/core/clock.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/attention_block.h"

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
  const int64_t O = int64_t{s.NH} * s.HD;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int64_t t = row0; t < row0 + c; ++t) {
        const int64_t li = (b * s.NH + h) * s.T_local + t;
        const float la = L[li], lb = lse[li];
        if (lb == -std::numeric_limits<float>::infinity()) continue;  // saw no key here
        const float m = std::max(la, lb);
        const float lnew = m + std::log(std::exp(la - m) + std::exp(lb - m));
        const float wa = std::exp(la - lnew), wb = std::exp(lb - lnew);
        float* a = acc + (b * s.T_local + t) * O + int64_t{h} * s.HD;
        const float* x = o + (b * s.T_local + t) * O + int64_t{h} * s.HD;
        for (int d = 0; d < s.HD; ++d) a[d] = a[d] * wa + x[d] * wb;
        L[li] = lnew;
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
    : group_(std::move(ring)), type_(CommType::kP2P), cp_size_(cp_size),
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

void BlockAttention::forward(Tensor& attn, Tensor& lse, const Tensor& qkv,
                             const BlockAttentionShape& s) const {
  const int N = group_->size(), r = group_->rank();
  const int64_t c = s.seq / (2 * cp_size_), O = int64_t{s.NH} * s.HD;
  const std::vector<int64_t> q_pos = chunk_positions(r, s.seq);
  TESSERA_CHECK(qkv.dim(0) == s.B * s.T_local &&
                s.T_local == static_cast<int64_t>(q_pos.size()) * c);
  Tensor acc = Tensor::zeros({s.B * s.T_local, O}, DType::kF32);
  lse = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  std::fill(lse.data<float>(), lse.data<float>() + lse.numel(),
            -std::numeric_limits<float>::infinity());
  Tensor ob = Tensor::empty({s.B * s.T_local, O}, DType::kF32);
  Tensor lb = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  // This rank's queries against the block of `holder` (kv: its keys and values).
  auto attend = [&](const Tensor& kv, int holder) {
    visit_float(qkv.dtype(), [&](auto tag) {
      using F = decltype(tag);
      const int64_t kvW = kv.dim(1);
      const std::vector<int64_t> k_pos = chunk_positions(holder, s.seq);
      for (int qs = 0; qs < static_cast<int>(q_pos.size()); ++qs)
        for (int ks = 0; ks < static_cast<int>(k_pos.size()); ++ks) {
          const kernels::AttentionBlock a = block_of(s, c, qs, q_pos[qs], k_pos[ks]);
          if (a.k_pos > a.q_pos + c - 1) continue;  // every key after every query
          pairs_ += s.B * s.NH * causal_pairs(a.q_pos, a.k_pos, c);
          const F* k = kv.data<F>() + ks * c * kvW;
          kernels::attention_block_forward(ob.data<float>() + qs * c * O, lb.data<float>() + qs * c,
                                           qkv.data<F>() + qs * c * qkv.dim(1), k,
                                           k + int64_t{s.KV} * s.HD, a, s.dropout);
          merge(acc.data<float>(), lse.data<float>(), ob.data<float>(), lb.data<float>(), s,
                qs * c, c);
        }
    });
  };
  Tensor mine = take_kv(qkv, s);
  if (type_ == CommType::kAllGather) {
    Tensor all = Tensor::empty({N * mine.dim(0), mine.dim(1)}, mine.dtype(), MemoryCategory::kComm);
    const Clock::time_point t0 = Clock::now();
    group_->all_gather(mine, all).wait();
    comm_seconds_ += seconds_since(t0);
    for (int h = 0; h < N; ++h) attend(all.slice_rows(h * mine.dim(0), (h + 1) * mine.dim(0)), h);
  } else {
    Tensor cur = mine, next = Tensor::empty(mine.shape(), mine.dtype(), MemoryCategory::kComm);
    for (int step = 0; step < N; ++step) {
      comm::Work sent, received;
      if (step + 1 < N) {  // the block moves on while this rank computes with it
        sent = group_->send(cur, (r + 1) % N, kKvTag);
        received = group_->recv(next, (r + N - 1) % N, kKvTag);
      }
      attend(cur, (r + N - step) % N);
      if (step + 1 < N) {
        const Clock::time_point t0 = Clock::now();
        sent.wait();
        received.wait();
        comm_seconds_ += seconds_since(t0);
        std::swap(cur, next);
      }
    }
  }
  attn = acc.to(qkv.dtype(), MemoryCategory::kActivations);
}

Tensor BlockAttention::backward(const Tensor& dattn, const Tensor& qkv, const Tensor& attn,
                                const Tensor& lse, const BlockAttentionShape& s) const {
  const int N = group_->size(), r = group_->rank();
  const int64_t c = s.seq / (2 * cp_size_), O = int64_t{s.NH} * s.HD;
  const int64_t rows = s.B * s.T_local;
  const std::vector<int64_t> q_pos = chunk_positions(r, s.seq);
  // delta = rowsum(dO * O) per (sample, head, query), from the whole attention's output.
  Tensor delta = Tensor::empty({s.B, s.NH, s.T_local}, DType::kF32);
  visit_float(qkv.dtype(), [&](auto tag) {
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
  Tensor dq = Tensor::zeros({rows, O}, DType::kF32);
  // This rank's queries' share of the gradients of `holder`'s block (kv), into dkv.
  auto attend = [&](const Tensor& kv, Tensor& dkv, int holder) {
    visit_float(qkv.dtype(), [&](auto tag) {
      using F = decltype(tag);
      const int64_t kvW = kv.dim(1), KVHD = int64_t{s.KV} * s.HD;
      const std::vector<int64_t> k_pos = chunk_positions(holder, s.seq);
      for (int qs = 0; qs < static_cast<int>(q_pos.size()); ++qs)
        for (int ks = 0; ks < static_cast<int>(k_pos.size()); ++ks) {
          const kernels::AttentionBlock a = block_of(s, c, qs, q_pos[qs], k_pos[ks]);
          if (a.k_pos > a.q_pos + c - 1) continue;
          pairs_ += s.B * s.NH * causal_pairs(a.q_pos, a.k_pos, c);
          const F* k = kv.data<F>() + ks * c * kvW;
          float* dk = dkv.data<float>() + ks * c * kvW;
          kernels::attention_block_backward(
              dq.data<float>() + qs * c * O, dk, dk + KVHD, dattn.data<F>() + qs * c * O,
              qkv.data<F>() + qs * c * qkv.dim(1), k, k + KVHD, lse.data<float>() + qs * c,
              delta.data<float>() + qs * c, a, s.dropout);
        }
    });
  };
  const Tensor mine = take_kv(qkv, s);
  Tensor dkv_mine;
  auto waited = [&](comm::Work& a, comm::Work& b) {
    const Clock::time_point t0 = Clock::now();
    a.wait();
    b.wait();
    comm_seconds_ += seconds_since(t0);
  };
  if (type_ == CommType::kAllGather) {
    Tensor all = Tensor::empty({N * rows, mine.dim(1)}, mine.dtype(), MemoryCategory::kComm);
    Tensor dall = Tensor::zeros({N * rows, mine.dim(1)}, DType::kF32, MemoryCategory::kComm);
    Clock::time_point t0 = Clock::now();
    group_->all_gather(mine, all).wait();
    comm_seconds_ += seconds_since(t0);
    for (int h = 0; h < N; ++h) {
      Tensor dpart = dall.slice_rows(h * rows, (h + 1) * rows);
      attend(all.slice_rows(h * rows, (h + 1) * rows), dpart, h);
    }
    dkv_mine = Tensor::empty({rows, mine.dim(1)}, DType::kF32, MemoryCategory::kComm);
    t0 = Clock::now();
    group_->reduce_scatter(dall, dkv_mine, comm::ReduceOp::kSum).wait();
    comm_seconds_ += seconds_since(t0);
  } else {
    Tensor cur = mine, next = Tensor::empty(mine.shape(), mine.dtype(), MemoryCategory::kComm);
    Tensor dcur = Tensor::zeros({rows, mine.dim(1)}, DType::kF32, MemoryCategory::kComm);
    Tensor dnext = Tensor::empty(dcur.shape(), DType::kF32, MemoryCategory::kComm);
    for (int step = 0; step < N; ++step) {
      comm::Work sent, received;
      if (step + 1 < N) {
        sent = group_->send(cur, (r + 1) % N, kKvTag);
        received = group_->recv(next, (r + N - 1) % N, kKvTag);
      }
      attend(cur, dcur, (r + N - step) % N);
      if (N == 1) break;  // a ring of one (a2a+p2p with one group): the block is this rank's
      // The block's gradient moves on with it; after the last step it reaches its owner.
      comm::Work dsent = group_->send(dcur, (r + 1) % N, kDkvTag);
      comm::Work dreceived = group_->recv(dnext, (r + N - 1) % N, kDkvTag);
      if (step + 1 < N) waited(sent, received);
      waited(dsent, dreceived);
      std::swap(cur, next);
      std::swap(dcur, dnext);
    }
    dkv_mine = dcur;
  }
  // dqkv = [dq | dk | dv] per row, in the storage type.
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype());
  visit_float(qkv.dtype(), [&](auto tag) {
    using F = decltype(tag);
    const int64_t W = qkv.dim(1), kvW = dkv_mine.dim(1);
    F* out = dqkv.data<F>();
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t j = 0; j < O; ++j) out[row * W + j] = from_f32<F>(dq.data<float>()[row * O + j]);
      for (int64_t j = 0; j < kvW; ++j)
        out[row * W + O + j] = from_f32<F>(dkv_mine.data<float>()[row * kvW + j]);
    }
  });
  return dqkv;
}

}  // namespace tessera::context
