// Matrix-vector products for the few rows of a decode step: out = inp @ weight^T + bias with at
// most kGemvMaxRows rows of input, weight stored (OC, C) as torch.nn.Linear (linear.h).
//
// A decode step multiplies one row per sequence by every weight matrix, so its time is the time
// to read the weights once. A GEMM library blocks for reuse that a row or two cannot give, and
// oneDNN's matmul reached 23-52 % of the read rate there (docs/inference.md, "Speed"). This
// kernel streams each weight row exactly once per call (up to 4 input rows; a second block of
// input rows reads it again, from cache), dotting it with every input row while it is in
// registers, with the OpenMP team splitting the output columns, so each thread reads one
// contiguous range of the weights from start to end.
//
// Numerics: the same contract as the linear layer's GEMM path, fp32 accumulation whatever T is.
// Each output is one dot product over C in 16 fp32 lanes (multiply-adds fused where the target
// has FMA, block after block of 16 in order, a masked last block), the lanes then summed and the
// bias added in fp32, rounded once to T. The summation order is not oneDNN's, so results match
// the GEMM path to rounding (a few fp32 ulp of the output scale; for 16-bit T, one rounding
// fewer than the GEMM-then-bias path). Each output depends only on its own weight row and input
// row, so a tensor-parallel column shard gives the bits of the whole layer's columns.
#pragma once

#include <cstdint>

#include "tessera/kernels/dispatch.h"

namespace tessera::kernels {

// The most input rows gemv_forward takes (linear_forward sends N <= this many rows here inside a
// ScopedGemvLinear, below).
constexpr int64_t kGemvMaxRows = 8;

// out (M,OC) = inp (M,C) @ weight (OC,C)^T + bias (OC), bias may be nullptr. 1 <= M <=
// kGemvMaxRows (a violation is a bug: it aborts); C or OC == 0 is allowed (OC == 0 writes
// nothing; C == 0 writes the bias, or zeros). out must not overlap the inputs. Parallel over
// output columns with the calling thread's OpenMP team when the weights are large enough.
template <typename T>
void gemv_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t M, int64_t C,
                  int64_t OC) {
  dispatch<&gemv_forward<T>>(out, inp, weight, bias, M, C, OC);
}

namespace detail {
inline thread_local int t_gemv_linear_scopes = 0;
}  // namespace detail

// While one of these lives on a thread, linear_forward (linear.h) on that thread sends products of
// at most kGemvMaxRows rows here; otherwise every linear forward runs on gemm.h. The caller opts
// in because the two paths differ in the last bits, and the GEMM path's rows do not depend on
// how many rows there are: training relies on that (an MoE expert's rows padded to capacity give
// the same bits, tests/unit/model/moe_layer_test.cc) and keeps it; inference's cached forward
// and head (GPTModel::forward_cached, GPTModel::logits) opt in. Nests; not copyable.
class ScopedGemvLinear {
 public:
  ScopedGemvLinear() { ++detail::t_gemv_linear_scopes; }
  ~ScopedGemvLinear() { --detail::t_gemv_linear_scopes; }
  ScopedGemvLinear(const ScopedGemvLinear&) = delete;
  ScopedGemvLinear& operator=(const ScopedGemvLinear&) = delete;
};
// Whether a ScopedGemvLinear lives on the calling thread.
inline bool gemv_linear_enabled() { return detail::t_gemv_linear_scopes > 0; }

}  // namespace tessera::kernels
