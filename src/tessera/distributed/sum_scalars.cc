#include "tessera/distributed/sum_scalars.h"

namespace tessera::distributed {

std::vector<std::vector<double>> gather_over(comm::ProcessGroup* group,
                                             const std::vector<double>& values) {
  if (group == nullptr || group->size() == 1) return {values};
  const int64_t k = static_cast<int64_t>(values.size()), n = group->size();
  Tensor mine = Tensor::empty({2 * k}, DType::kF32, MemoryCategory::kComm);
  Tensor all = Tensor::empty({2 * k * n}, DType::kF32, MemoryCategory::kComm);
  for (int64_t i = 0; i < k; ++i) {
    const float hi = static_cast<float>(values[i]);
    mine.data<float>()[2 * i] = hi;
    mine.data<float>()[2 * i + 1] = static_cast<float>(values[i] - hi);
  }
  group->all_gather(mine, all).wait();
  std::vector<std::vector<double>> out(n, std::vector<double>(k));
  const float* v = all.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i)
      out[r][i] = double(v[(r * k + i) * 2]) + double(v[(r * k + i) * 2 + 1]);
  return out;
}

std::vector<double> sum_over(comm::ProcessGroup* group, const std::vector<double>& values) {
  if (group == nullptr || group->size() == 1) return values;
  std::vector<double> total(values.size(), 0.0);
  for (const std::vector<double>& member : gather_over(group, values))
    for (size_t i = 0; i < total.size(); ++i) total[i] += member[i];
  return total;
}

}  // namespace tessera::distributed
