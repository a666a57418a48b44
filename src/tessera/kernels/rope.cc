// Rotary position embedding (contract in rope.h).
//
// The cos/sin table (T, HD/2) is rebuilt on every call: T * HD/2 sincos, measured at 0.03 ms of
// a 0.19 ms fp32 call at the gpt2-124m shape (B = 4, T = 256, 12 + 12 heads of 64,
// cache-resident, one thread). A cache of tables keyed on the positions was tried and measured
// no faster within noise, so there is no global state here.

#include "tessera/kernels/rope.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/simd/vec.h"

// Compiled per target like every kernel. The fp32 rotation is a plain loop, which GCC vectorises;
// 16-bit rows go through the vector layer (simd/vec.h), because as a plain loop GCC left their
// rounding scalar (bench/attention_bench Rope, 2026-12-05: bf16 1.5-1.6x faster on the vector layer
// at baseline and avx2, 1.1-1.3x at avx512 and avx512bf16; fp32 there 30% slower at baseline,
// level elsewhere). Products and sums are separate in both (no fused multiply-add:
// -ffp-contract=off), so every target gives the same bits, but for avx512bf16's bf16 stores,
// which give fp32 subnormals as zeros (docs/performance.md, "CPU targets").
TESSERA_TARGET_BEGIN
namespace {

// Below this many rotated elements (or a sixteenth as many sincos) a call stays on the calling
// thread: starting the team costs more than the work.
constexpr int64_t kMinParallelWork = 1 << 15;

// cos_t, sin_t (T, HD/2): row t for position positions[t] (nullptr: position t), angle =
// float(position) * inv_freq[i] in fp32, inv_freq from rope_inv_freq (rope_frequencies.h), as
// Transformers' LLaMA rotary embedding.
void build_table(std::vector<float>& cos_t, std::vector<float>& sin_t, const int32_t* positions,
                 int64_t T, int HD, float theta, const RopeScaling& scaling) {
  const int half = HD / 2;
  const std::vector<float> inv_freq = rope_inv_freq(HD, theta, scaling);
  cos_t.resize(static_cast<size_t>(T * half));
  sin_t.resize(cos_t.size());
#pragma omp parallel for if (T * half >= kMinParallelWork / 16)
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions ? positions[t] : t);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_t[t * half + i] = std::cos(angle);
      sin_t[t * half + i] = std::sin(angle);
    }
  }
}

// Rotates each (i, i + HD/2) pair of the NH + KV query and key heads by +angle (sign = 1) or
// -angle (sign = -1, the transpose).
template <typename Float>
void rotate(Float* qkv, const int32_t* positions, int64_t B, int64_t T, int NH, int KV, int HD,
            float theta, float sign, bool per_sample, int64_t max_position,
            const RopeScaling& scaling) {
  TESSERA_CHECK(B >= 0 && T >= 0 && NH > 0 && KV > 0 && HD > 0);
  TESSERA_CHECK_MSG(HD % 2 == 0, "rope: head dim must be even");
  TESSERA_CHECK_MSG(theta > 0.0f, "rope: theta must be positive");
  std::vector<float> cos_t, sin_t;
  // Per-sample positions lie in [0, P) (they restart at document starts; P = T, or the whole
  // sequence's length when these T tokens are a context-parallel rank's): a table of positions
  // 0 .. P-1 serves every sample, indexed by each token's position.
  const int64_t P = per_sample && max_position > 0 ? max_position : T;
  // Fewer rows than positions (decode: a token a sequence against a model of 2048 positions,
  // in every layer) get a table row per token instead: the table of all P positions cost more
  // sincos than the whole step's rotation, 22 layers x 2048 x 32 per decoded token of a 1 B
  // model. The same angles either way (float(position) * inv_freq), so the same bits.
  const bool every_position = per_sample && B * T >= P;
  const int64_t table_rows = every_position ? P : per_sample ? B * T : T;
  build_table(cos_t, sin_t, every_position ? nullptr : positions, table_rows, HD, theta, scaling);
  const int half = HD / 2;
  const int64_t width = (int64_t{NH} + 2 * KV) * HD;
  const int rotated_heads = NH + KV;  // queries then keys; values follow and are left alone
#pragma omp parallel for if (B * T * rotated_heads * HD >= kMinParallelWork)
  for (int64_t row = 0; row < B * T; ++row) {
    const int64_t position = per_sample ? positions[row] : row % T;
    TESSERA_CHECK(position >= 0 && position < P);
    const int64_t t = every_position ? position : per_sample ? row : row % T;
    const float* c = cos_t.data() + t * half;
    const float* s = sin_t.data() + t * half;
    Float* token = qkv + row * width;
    for (int head = 0; head < rotated_heads; ++head) {
      Float* x = token + int64_t{head} * HD;
      if constexpr (std::is_same_v<Float, float>) {
        for (int i = 0; i < half; ++i) {
          const float a = x[i], b = x[i + half], si = sign * s[i];
          x[i] = a * c[i] - b * si;
          x[i + half] = b * c[i] + a * si;
        }
      } else {
        for_each_block(0, half, [&](int64_t i, int lanes) {
          const VecF a = load(x + i, lanes), b = load(x + i + half, lanes);
          const VecF ci = load(c + i, lanes), si = splat(sign) * load(s + i, lanes);
          store(x + i, a * ci - b * si, lanes);
          store(x + i + half, b * ci + a * si, lanes);
        });
      }
    }
  }
}

}  // namespace

template <typename Float>
void rope_forward(Float* qkv, const int32_t* positions, int64_t B, int64_t T, int NH, int KV,
                  int HD, float theta, bool per_sample, int64_t max_position,
                  const RopeScaling& scaling) {
  rotate(qkv, positions, B, T, NH, KV, HD, theta, 1.0f, per_sample, max_position, scaling);
}

template <typename Float>
void rope_backward(Float* dqkv, const int32_t* positions, int64_t B, int64_t T, int NH, int KV,
                   int HD, float theta, bool per_sample, int64_t max_position,
                   const RopeScaling& scaling) {
  rotate(dqkv, positions, B, T, NH, KV, HD, theta, -1.0f, per_sample, max_position, scaling);
}

void register_rope() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::rope_forward<T>>(kThisTarget, &rope_forward<T>);
    register_kernel<&kernels::rope_backward<T>>(kThisTarget, &rope_backward<T>);
  });
}

TESSERA_TARGET_END
