#include "tessera/io/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::io {
namespace {

TEST(AlignedBuffer, IsAlignedZeroFilledAndAccounted) {
  auto& accountant = MemoryAccountant::instance();
  const int other = static_cast<int>(MemoryCategory::kOther);
  const int64_t before = accountant.snapshot().current[other];
  {
    AlignedBuffer buffer(3 * 4096 + 512, 4096, MemoryCategory::kOther);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 4096, 0u);
    EXPECT_EQ(buffer.size(), 3 * 4096 + 512);
    for (int64_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer.as<unsigned char>()[i], 0);
    EXPECT_EQ(accountant.snapshot().current[other] - before, buffer.size());
    AlignedBuffer moved = std::move(buffer);
    EXPECT_EQ(buffer.data(), nullptr);
    EXPECT_EQ(buffer.size(), 0);
    EXPECT_EQ(moved.size(), 3 * 4096 + 512);
    EXPECT_EQ(accountant.snapshot().current[other] - before, moved.size());
  }
  EXPECT_EQ(accountant.snapshot().current[other], before);
}

TEST(AlignedBuffer, SmallAlignmentsAreRaisedAndOthersRefused) {
  AlignedBuffer small(64, 4, MemoryCategory::kOther);
  EXPECT_EQ(small.alignment(), static_cast<int64_t>(sizeof(void*)));
  EXPECT_THROW(AlignedBuffer(64, 3000, MemoryCategory::kOther), Error);
  EXPECT_THROW(AlignedBuffer(-1, 4096, MemoryCategory::kOther), Error);
}

}  // namespace
}  // namespace tessera::io
