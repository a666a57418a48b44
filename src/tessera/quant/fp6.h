// FP6 e3m2, the 6-bit float of FP6-LLM (Xia et al. 2024; DeepSpeed's
// quantization_mode='wf6af16'): 1 sign bit, 3 exponent bits (bias 3), 2 mantissa bits, code
// s·eee·mm. Exponent 0 is subnormal (value m/4 · 2^-2), every other exponent is an ordinary
// value (1 + m/4) · 2^(e-3) — there is no infinity and no NaN — so the 32 magnitudes are
// 0, 0.0625 … 0.1875, 0.25 … 0.4375, 0.5, …, 16, 20, 24, 28, the largest 28.
//
// Encoding (of a weight already divided by its row's scale) is DeepSpeed's path through qtorch's
// float_quantize(x, exp=3, man=2, "nearest"): add half an ulp and truncate, so halfway cases
// round away from zero; magnitudes beyond 28 clamp to 28; the sign is kept (-0 is code 0x20).
// Decoding is exact in fp32 for all 64 codes.
//
// Packing: 4 codes in 3 bytes, most significant bit first —
//   b0 = c0 << 2 | c1 >> 4,   b1 = (c1 & 15) << 4 | c2 >> 2,   b2 = (c2 & 3) << 6 | c3.
#pragma once

#include <cstdint>

namespace tessera::quant {

inline constexpr float kFp6Max = 28.0f;

// The code of x (finite; the caller divides by the scale first).
uint8_t fp6_encode(float x);
// The value of a code (its low 6 bits).
float fp6_decode(uint8_t code);

// n codes (n a multiple of 4) into 3n/4 bytes, and back.
void fp6_pack(const uint8_t* codes, int64_t n, uint8_t* bytes);
void fp6_unpack(const uint8_t* bytes, int64_t n, uint8_t* codes);

}  // namespace tessera::quant
