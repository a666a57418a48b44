// Matrix-vector products for decode (contract in gemv.h), compiled once per CPU target.
#include "tessera/kernels/gemv.h"

#include <algorithm>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/kernels/gemm_clock.h"
#include "tessera/kernels/simd/vec.h"

TESSERA_TARGET_BEGIN
namespace {

// Below this many weight elements (256 KiB of fp32, ~10 us on one core) a fork/join of the
// OpenMP team costs about as much as the second core saves.
constexpr int64_t kParallelWeights = int64_t{1} << 16;

// Output columns per unit of work of the OpenMP loop: a group's weight rows are adjacent, and a
// thread reads its groups in order, so each thread's weights are one contiguous range.
constexpr int kGroupCols = 8;
// Input rows per tile: more rows would need more accumulators than the 16 registers of AVX2 hold
// (a VecF is two ymm registers there).
constexpr int kRowsPerTile = 4;

// out[r * OC + o] for r < kRows: input rows inp + r * C against weight row o, in fp32 lanes
// (gemv.h's summation order), plus bias[o]. One weight row at a time, so a thread's reads are one
// linear stream: interleaving 4 or 8 rows (more independent multiply-add chains) read GPT-2's
// rows of 768 bf16 at a third of the rate, the hardware prefetcher restarting on every row
// (5.7 against 17 GB/s on one core). Software prefetch 1 KiB ahead gained nothing over that.
template <int kRows, typename T>
[[gnu::always_inline]] inline void tile(T* out, const T* inp, const T* weight, const T* bias,
                                        int64_t C, int64_t OC, int64_t o) {
  VecF acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = zero();
  const T* w = weight + o * C;
  for_each_block(0, C, [&](int64_t i, int lanes) {
    const VecF wv = load(w + i, lanes);
    for (int r = 0; r < kRows; ++r) acc[r] = fmadd(load(inp + r * C + i, lanes), wv, acc[r]);
  });
  for (int r = 0; r < kRows; ++r) {
    float s = reduce_add(acc[r]);
    if (bias != nullptr) s += to_f32(bias[o]);
    out[r * OC + o] = from_f32<T>(s);
  }
}

// The columns [o, o + cols) of kRows input rows.
template <int kRows, typename T>
void group(T* out, const T* inp, const T* weight, const T* bias, int64_t C, int64_t OC, int64_t o,
           int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) tile<kRows>(out, inp, weight, bias, C, OC, o + j);
}

template <typename T>
void rows_group(int rows, T* out, const T* inp, const T* weight, const T* bias, int64_t C,
                int64_t OC, int64_t o, int64_t cols) {
  switch (rows) {
    case 1:
      return group<1>(out, inp, weight, bias, C, OC, o, cols);
    case 2:
      return group<2>(out, inp, weight, bias, C, OC, o, cols);
    case 3:
      return group<3>(out, inp, weight, bias, C, OC, o, cols);
    default:
      return group<4>(out, inp, weight, bias, C, OC, o, cols);
  }
}

}  // namespace

template <typename T>
void gemv_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t M, int64_t C,
                  int64_t OC) {
  TESSERA_CHECK(M >= 1 && M <= kGemvMaxRows && C >= 0 && OC >= 0);
  const detail::GemmClock clock;  // counted with the GEMMs (gemm.h's gemm_seconds)
  const int64_t groups = (OC + kGroupCols - 1) / kGroupCols;
  // Static schedule: each thread streams one contiguous range of weight rows.
#pragma omp parallel for schedule(static) if (OC * C >= kParallelWeights)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t o = g * kGroupCols, cols = std::min<int64_t>(kGroupCols, OC - o);
    for (int64_t r = 0; r < M; r += kRowsPerTile) {
      const int rows = static_cast<int>(std::min<int64_t>(kRowsPerTile, M - r));
      rows_group(rows, out + r * OC, inp + r * C, weight, bias, C, OC, o, cols);
    }
  }
}

void register_gemv() {
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::gemv_forward<T>>(kThisTarget, &gemv_forward<T>);
  });
}

TESSERA_TARGET_END
