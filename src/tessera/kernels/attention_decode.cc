// Decode attention over a paged KV cache (contract in attention_decode.h), compiled once per CPU
// target.
#include "tessera/kernels/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/fast_exp.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Below this many multiply-adds (query rows x heads x keys x HD, twice) the OpenMP team is not
// worth waking: a decode step of a short sequence.
constexpr int64_t kParallelWork = int64_t{1} << 15;

int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// Query row r of head h: scores, softmax and the weighted sum of values, written to dst.
template <typename T, typename TC>
void one_query(T* dst, const T* q, const TC* const* blocks, const DecodeAttention& a, int64_t r,
               int h, float* scratch) {
  const int64_t ldh = round_up16(a.HD);
  float* qs = scratch;         // (HD) the scaled query
  float* acc = scratch + ldh;  // (HD) the weighted sum of values
  float* p = acc + ldh;        // (keys) scores, then probabilities
  const int64_t pos = a.past + r;
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
  const int64_t keys = pos - first + 1;
  const int64_t kv_col = int64_t{h / (a.NH / a.KV)} * a.HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.HD));
  const T* qrow = q + r * a.q_ld + int64_t{h} * a.HD;
  for_each_block(0, a.HD, [&](int64_t c, int lanes) {
    store(qs + c, load(qrow + c, lanes) * splat(scale), lanes);
  });
  const auto key_row = [&](int64_t t) {
    return blocks[t / a.block_size] + (t % a.block_size) * a.kv_ld + kv_col;
  };
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    const TC* k = key_row(first + j);
    VecF s = zero();
    for_each_block(0, a.HD, [&](int64_t c, int lanes) {
      s = fmadd(load(qs + c, lanes), load(k + c, lanes), s);
    });
    p[j] = reduce_add(s);
    top = std::max(top, p[j]);
  }
  VecF sum = zero();
  for_each_block(0, keys, [&](int64_t j, int lanes) {
    const VecF e = fast_exp(load(p + j, lanes) - splat(top));
    store(p + j, e, lanes);
    sum = sum + zero_unless(first_n(lanes), e);  // exp(0 - top) of the zeroed lanes dropped
  });
  const float inv = 1.0f / reduce_add(sum);
  std::fill(acc, acc + ldh, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    const TC* v = key_row(first + j) + a.v_offset;
    const VecF pj = splat(p[j]);
    for_each_block(0, a.HD, [&](int64_t c, int lanes) {
      store(acc + c, fmadd(pj, load(v + c, lanes), load(acc + c, lanes)), lanes);
    });
  }
  for_each_block(0, a.HD, [&](int64_t c, int lanes) {
    store(dst + c, load(acc + c, lanes) * splat(inv), lanes);
  });
}

}  // namespace

template <typename T, typename TC>
void attention_decode_forward(T* out, const T* q, const TC* const* blocks,
                              const DecodeAttention& a) {
  TESSERA_CHECK(a.rows >= 0 && a.past >= 0 && a.block_size > 0 && a.window >= 0);
  TESSERA_CHECK(a.NH > 0 && a.KV > 0 && a.HD > 0 && a.NH % a.KV == 0);
  TESSERA_CHECK(a.q_ld >= int64_t{a.NH} * a.HD && a.o_ld >= int64_t{a.NH} * a.HD);
  TESSERA_CHECK(a.kv_ld >= a.v_offset + int64_t{a.KV} * a.HD && a.v_offset >= int64_t{a.KV} * a.HD);
  const int64_t tasks = a.rows * a.NH, keys = a.past + a.rows;
  const int64_t scratch_floats = keys + 2 * round_up16(a.HD) + 16;
#pragma omp parallel for schedule(static) if (2 * tasks * keys * a.HD >= kParallelWork)
  for (int64_t task = 0; task < tasks; ++task) {
    thread_local ScratchBuffer scratch;
    const int64_t r = task / a.NH;
    const int h = static_cast<int>(task % a.NH);
    one_query(out + r * a.o_ld + int64_t{h} * a.HD, q, blocks, a, r, h,
              scratch.floats(scratch_floats));
  }
}

void register_attention_decode() {
  for_each_storage_type([]<typename T>() {
    auto with_cache = []<typename TC>() {
      register_kernel<&kernels::attention_decode_forward<T, TC>>(kThisTarget,
                                                                 &attention_decode_forward<T, TC>);
    };
    with_cache.template operator()<float>();
    with_cache.template operator()<bf16>();
    with_cache.template operator()<fp16>();
    with_cache.template operator()<fp8_e4m3>();
    with_cache.template operator()<fp8_e5m2>();
  });
}

TESSERA_TARGET_END
