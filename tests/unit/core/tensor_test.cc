#include "tessera/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tessera/core/philox.h"
#include "testing/numeric.h"

namespace tessera {
namespace {

TEST(Tensor, AllocationIsAccountedPerCategory) {
  auto& acc = MemoryAccountant::instance();
  const auto before = acc.snapshot();
  const int grads = static_cast<int>(MemoryCategory::kGrads);
  {
    Tensor t = Tensor::zeros({4, 8}, DType::kF32, MemoryCategory::kGrads);
    EXPECT_EQ(acc.snapshot().current[grads] - before.current[grads], 4 * 8 * 4);
    Tensor v = t.view({32});  // a view shares storage: no new bytes
    EXPECT_EQ(acc.snapshot().current[grads] - before.current[grads], 4 * 8 * 4);
  }
  EXPECT_EQ(acc.snapshot().current[grads], before.current[grads]);
  EXPECT_GE(acc.snapshot().peak[grads], before.current[grads] + 128);
}

TEST(Tensor, SliceRowsIsAViewOfTheSameStorage) {
  Tensor t = Tensor::zeros({3, 2}, DType::kF32);
  Tensor row1 = t.slice_rows(1, 2);
  row1.data<float>()[1] = 5.0f;
  EXPECT_EQ(t.data<float>()[3], 5.0f);
  EXPECT_EQ(row1.numel(), 2);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(to_f32(bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to even (1 + 2^-6).
  EXPECT_EQ(to_f32(bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(to_f32(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_f32(bf16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, BulkConversionMatchesScalar) {
  auto x = testing::random_normal(1000, 7, 3.0f);
  Tensor f = Tensor::empty({1000}, DType::kF32);
  std::copy(x.begin(), x.end(), f.data<float>());
  Tensor b = f.to(DType::kBF16, MemoryCategory::kOther);
  Tensor h = f.to(DType::kF16, MemoryCategory::kOther);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(b.data<bf16>()[i].bits, bf16(x[i]).bits) << i;
    EXPECT_EQ(to_f32(h.data<fp16>()[i]), to_f32(fp16(x[i]))) << i;
    EXPECT_NEAR(to_f32(h.data<fp16>()[i]), x[i], std::fabs(x[i]) * 1e-3);
  }
}

TEST(Philox, MatchesPublishedKnownAnswer) {
  // Known-answer vector from Random123 (kat_vectors: philox4x32_10, counter and key all ones
  // pattern 0x243f6a88... "pi" test).
  auto out = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                        {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(out[0], 0xd16cfe09u);
  EXPECT_EQ(out[1], 0x94fdccebu);
  EXPECT_EQ(out[2], 0x5001e420u);
  EXPECT_EQ(out[3], 0x24126ea1u);
}

TEST(Philox, NormalHasUnitMomentsAndDependsOnlyOnCoordinates) {
  const PhiloxKey key = philox_key(1234, RngPurpose::kInit, 99);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = philox_normal(key, 3, i);
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
  EXPECT_EQ(philox_normal(key, 3, 12345), philox_normal(key, 3, 12345));
  EXPECT_NE(philox_normal(key, 3, 12345), philox_normal(key, 4, 12345));
}

// PhiloxNormals shares a block's Philox rounds and a pair's logarithm between the elements that
// use them; whatever the order of the calls (along a row, backwards, alternating rows with the
// same column block), each value is Box-Muller on the element's own block, computed here from
// philox_block directly.
TEST(Philox, NormalsAreBoxMullerOfTheElementsBlockInAnyOrder) {
  const PhiloxKey key = philox_key(7, RngPurpose::kInit, 5);
  const auto box_muller = [&](uint64_t row, uint64_t col) {
    const auto r = philox_block(key, row, col / 4);
    const int pair = static_cast<int>(col % 4) / 2;
    const double u1 = ((r[2 * pair] >> 8) + 0.5) / 16777216.0;
    const double u2 = (r[2 * pair + 1] >> 8) / 16777216.0;
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 6.283185307179586 * u2;
    return static_cast<float>(col % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle));
  };
  std::vector<std::pair<uint64_t, uint64_t>> order;
  for (uint64_t c = 0; c < 11; ++c) order.push_back({2, c});
  for (uint64_t c = 11; c-- > 0;) order.push_back({3, c});
  for (uint64_t c = 0; c < 11; ++c) order.push_back({c % 2 == 0 ? 4 : 5, c / 2});
  order.push_back({6, 1});  // the other element of a pair first, then the pair's first
  order.push_back({6, 0});
  PhiloxNormals normals(key);
  for (const auto& [row, col] : order) {
    EXPECT_EQ(normals(row, col), box_muller(row, col)) << "row " << row << ", col " << col;
    EXPECT_EQ(philox_normal(key, row, col), box_muller(row, col));
  }
}

}  // namespace
}  // namespace tessera
