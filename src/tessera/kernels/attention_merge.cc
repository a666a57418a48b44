#include "tessera/kernels/attention_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::kernels {

void attention_merge(float* acc, float* L, const float* o, const float* lse, int64_t B, int64_t T,
                     int NH, int HD, int64_t row0, int64_t rows) {
  const int64_t O = int64_t{NH} * HD;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int64_t t = row0; t < row0 + rows; ++t) {
        const int64_t li = (b * NH + h) * T + t;
        const float la = L[li], lb = lse[li];
        if (lb == -std::numeric_limits<float>::infinity()) continue;  // saw no key here
        const float m = std::max(la, lb);
        const float lnew = m + std::log(std::exp(la - m) + std::exp(lb - m));
        const float wa = std::exp(la - lnew), wb = std::exp(lb - lnew);
        float* a = acc + (b * T + t) * O + int64_t{h} * HD;
        const float* x = o + (b * T + t) * O + int64_t{h} * HD;
        for (int d = 0; d < HD; ++d) a[d] = a[d] * wa + x[d] * wb;
        L[li] = lnew;
      }
}

}  // namespace tessera::kernels
