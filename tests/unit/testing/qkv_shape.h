// The fused q/k/v layout the attention and RoPE kernels share, for their tests: each of B*T
// tokens holds NH query heads, then KV key heads, then KV value heads of HD features.
#pragma once

#include <cstdint>

namespace tessera::testing {

struct QkvShape {
  int64_t B, T;
  int NH, KV, HD;
  int64_t width() const { return (int64_t{NH} + 2 * KV) * HD; }  // per token
  int64_t qkv_size() const { return B * T * width(); }
  int64_t out_size() const { return B * T * NH * HD; }  // the attention output
  int64_t lse_size() const { return B * NH * T; }       // its log-sum-exp
};

}  // namespace tessera::testing
