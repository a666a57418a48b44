#include "tessera/kernels/linear.h"

#include <algorithm>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/kernels/elementwise.h"
#include "tessera/kernels/gemm.h"
#include "tessera/kernels/gemv.h"
#include "tessera/kernels/scratch.h"
#include "tessera/kernels/scratch_plan.h"
#include "tessera/kernels/simd/vec.h"

// Compiled per target: the bias loops use the target's instructions (plain C++ the compiler
// vectorises, or the vector layer for 16-bit rows); the products go through gemm (gemm.h chooses
// oneDNN, the blocked GEMM or widening to fp32 for 16-bit types).
TESSERA_TARGET_BEGIN
namespace {

// Below this many elements a pass is a few microseconds: not worth an OpenMP fork/join.
constexpr int64_t kParallelElems = int64_t{1} << 16;

// out[n, :] = in[n, :] + bias in fp32, rounded once to T. `in` is `out` itself (in place) or,
// where 16-bit gemms are widened to fp32 (gemm.h, gemm_widens), the fp32 product: then the sum
// is rounded once and the output is written in one pass. In place after a 16-bit gemm (oneDNN's
// bf16 matmul, or the blocked GEMM) `out` already holds the product rounded to 16 bits, so the
// result is rounded twice (product, then sum): within one ulp, and it keeps the gemm's 16-bit
// output (no fp32 temporary of N x OC).
// fp32 is a plain loop, which GCC vectorises; 16-bit rows go through the vector layer
// (simd/vec.h), whose 16-bit loads and stores are core/dtype.h's conversions bit for bit (but
// for avx512bf16's bf16 stores, which give fp32 subnormals as zeros: docs/performance.md, "CPU
// targets"): as a plain loop GCC left the rounding scalar, and the bf16 pass took 2.8x the fp32
// one's time at the AVX2 cap (perf of model_step's gpt2 step). The same sum either way; measured
// 2026-12-05 (`bench/pointwise_bench` BiasForward, docs/performance.md): bf16 1.6-1.9x faster on
// the vector layer at baseline, avx2 and avx512bf16 (1.1x at avx512), fp32 20-40% slower there at
// baseline and avx512 than as the plain loop.
template <typename T, typename TIn>
void add_bias(T* out, const TIn* in, const T* bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static) if (N * OC >= kParallelElems)
  for (int64_t n = 0; n < N; ++n) {
    T* row = out + n * OC;
    const TIn* src = in + n * OC;
    if constexpr (std::is_same_v<T, float> && std::is_same_v<TIn, float>) {
      for (int64_t o = 0; o < OC; ++o) row[o] = src[o] + bias[o];
    } else {
      for_each_block(0, OC, [&](int64_t o, int lanes) {
        store(row + o, load(src + o, lanes) + load(bias + o, lanes), lanes);
      });
    }
  }
}

// dbias[o] += sum_n dout[n, o], fp32 accumulators. Threads own disjoint column blocks and walk
// all rows, so no reduction between threads is needed and each row segment is contiguous.
template <typename T>
void bias_grad(float* dbias, const T* dout, int64_t N, int64_t OC) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * OC >= kParallelElems)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o0 = b * kBlock, o1 = std::min(OC, o0 + kBlock);
    float acc[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC;
      for (int64_t o = o0; o < o1; ++o) acc[o - o0] += to_f32(row[o]);
    }
    for (int64_t o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
  }
}

// Widened 16-bit products take the fp32 copies from here (one per calling thread, kept): it grows
// to the largest N x OC of the run in fp32 (for an LM head, the logits' size), beside gemm's own
// widening buffers, and is accounted as MemoryCategory::kOther.
ScratchBuffer& linear_scratch() {
  thread_local ScratchBuffer buffer;
  return buffer;
}

template <typename T>
constexpr bool kIs16Bit = !std::is_same_v<T, float>;

}  // namespace

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  // out (N,OC) = inp (N,C) @ weight (OC,C)^T
  // A decode step's few rows: the products only stream the weights, which the GEMM libraries do
  // not do at the read rate (gemv.h). Only where the caller asked (inference), since the bits
  // then depend on the row count.
  if (N >= 1 && N <= kGemvMaxRows && gemv_linear_enabled())
    return kernels::gemv_forward(out, inp, weight, bias, N, C, OC);
  if constexpr (kIs16Bit<T>) {
    if (bias != nullptr && gemm_widens(dtype_of<T>())) {
      float* product = linear_scratch().floats(N * OC);
      gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, product, OC);
      return add_bias(out, product, bias, N, OC);
    }
  }
  gemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
  if (bias != nullptr) add_bias(out, out, bias, N, OC);
}

template <typename T>
void linear_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                     const T* weight, int64_t N, int64_t C, int64_t OC) {
  if constexpr (kIs16Bit<T>) {
    if (gemm_widens(dtype_of<T>())) {
      // dout feeds both products and the bias sum: widened once here instead of once per gemm.
      // The products are the same fp32 gemms on the same values, so the bits are unchanged.
      float* dout32 = linear_scratch().floats(N * OC);
      widen_to_f32(dout32, dout, N * OC);
      if (dinp != nullptr)
        gemm_fp32_a(false, false, N, C, OC, 1.0f, dout32, OC, weight, C, 0.0f, dinp, C);
      gemm_fp32_a(true, false, OC, C, N, 1.0f, dout32, OC, inp, C, 1.0f, dweight, C);
      if (dbias != nullptr) bias_grad(dbias, dout32, N, OC);
      return;
    }
  }
  // dinp (N,C) = dout (N,OC) @ weight (OC,C)
  if (dinp != nullptr) gemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C); for 16-bit types the fp32-output overload, so the sum over
  // tokens and micro-batches never passes through bf16.
  gemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) bias_grad(dbias, dout, N, OC);
}

template <typename T>
void bias_forward(T* out, const T* bias, int64_t N, int64_t OC) {
  add_bias(out, out, bias, N, OC);
}
template <typename T>
void bias_backward(float* dbias, const T* dout, int64_t N, int64_t OC) {
  bias_grad(dbias, dout, N, OC);
}
// The plans follow linear_forward and linear_backward above branch for branch: the same
// products (their gemm arguments) and the same fp32 copy.
void plan_linear_forward(ScratchPlan& plan, DType t, int64_t N, int64_t C, int64_t OC, bool bias,
                         int threads) {
  if (N >= 1 && N <= kGemvMaxRows && gemv_linear_enabled()) return;  // gemv: no scratch
  GemmShape product{false, true, N, OC, C, C, C, OC, 1.0f, 0.0f, t, t, t, threads};
  if (t != DType::kF32 && bias && gemm_widens(t)) {
    plan.grow("linear fp32 copy", 4 * std::max<int64_t>(1, N * OC));
    product.c = DType::kF32;
  }
  plan_gemm(plan, product);
}

// The bias gradient is a sum over rows and takes no scratch, so the backward plan does not ask.
void plan_linear_backward(ScratchPlan& plan, DType t, int64_t N, int64_t C, int64_t OC, bool dinp,
                          int threads) {
  GemmShape input_grad{false, false, N, C, OC, OC, C, C, 1.0f, 0.0f, t, t, t, threads};
  GemmShape weight_grad{true, false, OC, C, N, OC, C, C, 1.0f, 1.0f, t, t, DType::kF32, threads};
  if (t != DType::kF32 && gemm_widens(t)) {  // dout widened once, the products gemm_fp32_a's
    plan.grow("linear fp32 copy", 4 * std::max<int64_t>(1, N * OC));
    input_grad.a = weight_grad.a = DType::kF32;
  }
  if (dinp) plan_gemm(plan, input_grad);
  plan_gemm(plan, weight_grad);
}

void register_linear() {
  register_kernel<&kernels::plan_linear_forward>(kThisTarget, &plan_linear_forward);
  register_kernel<&kernels::plan_linear_backward>(kThisTarget, &plan_linear_backward);
  for_each_storage_type([]<typename T>() {
    register_kernel<&kernels::linear_forward<T>>(kThisTarget, &linear_forward<T>);
    register_kernel<&kernels::linear_backward<T>>(kThisTarget, &linear_backward<T>);
    register_kernel<&kernels::bias_forward<T>>(kThisTarget, &bias_forward<T>);
    register_kernel<&kernels::bias_backward<T>>(kThisTarget, &bias_backward<T>);
  });
}

TESSERA_TARGET_END
