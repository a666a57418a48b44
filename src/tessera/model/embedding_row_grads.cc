#include "tessera/model/embedding_row_grads.h"

#include <algorithm>

namespace tessera::model {

void EmbeddingRowGrads::collect(const int32_t* tokens, int64_t n, int64_t vocab_start, int64_t V,
                                std::vector<int32_t>& local) {
  rows.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    if (row >= 0 && row < V) rows.push_back(static_cast<int32_t>(row));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  local.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_start;
    local[i] = -1;
    if (row >= 0 && row < V)
      local[i] = static_cast<int32_t>(std::lower_bound(rows.begin(), rows.end(), row) -
                                      rows.begin());
  }
}

void EmbeddingRowGrads::clear() {
  rows.clear();
  grad = Tensor();
  filled = false;
}

}  // namespace tessera::model
