#include "tessera/kernels/rope_frequencies.h"

#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::kernels {

std::vector<float> rope_inv_freq(int HD, float theta, const RopeScaling& scaling) {
  TESSERA_CHECK_MSG(HD > 0 && HD % 2 == 0, "rope: head dim must be even");
  TESSERA_CHECK_MSG(theta > 0.0f, "rope: theta must be positive");
  const int half = HD / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(HD);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (!scaling.llama3) return inv_freq;
  const RopeScaling& s = scaling;
  TESSERA_CHECK(s.factor > 0.0f && s.original_max_position_embeddings > 0 &&
                s.low_freq_factor != s.high_freq_factor);
  // Transformers mixes Python scalars into float32 tensors: every operation below rounds to
  // float, the scalars first (2π, L / low and L / high are computed in double, then rounded).
  const double L = s.original_max_position_embeddings;
  const float low_wavelen = static_cast<float>(L / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(L / s.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float band = static_cast<float>(static_cast<double>(s.high_freq_factor) -
                                        static_cast<double>(s.low_freq_factor));
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    if (wavelen > low_wavelen) {
      f = f / s.factor;
    } else if (!(wavelen < high_wavelen)) {
      const float smooth = (static_cast<float>(L) / wavelen - s.low_freq_factor) / band;
      f = (1.0f - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

}  // namespace tessera::kernels
