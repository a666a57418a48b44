// Tensor-parallel shard arithmetic (model/shard.h): which global rows or columns each rank holds.
#include "tessera/model/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/parameter.h"

namespace tessera::model {
namespace {

// The global indices along the split dim held by `rank`, in local order.
std::vector<int64_t> held(const Shape& shape, const ShardSpec& spec, int tp, int rank) {
  std::vector<int64_t> out;
  for (const ShardPiece& p : tp_pieces(shape, spec, tp, rank))
    for (int64_t i = 0; i < p.length; ++i) out.push_back(p.global_begin + i);
  return out;
}

TEST(Shard, PlainSplitTakesContiguousBlocks) {
  const ShardSpec spec = ShardSpec::split(0);
  EXPECT_EQ(held({8, 3}, spec, 4, 2), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(tp_local_shape({8, 3}, spec, 4), (Shape{2, 3}));
  EXPECT_EQ(tp_local_shape({3, 8}, ShardSpec::split(1), 2), (Shape{3, 4}));
}

TEST(Shard, FusedQkvTakesItsHeadsOfEachSection) {
  // 4 query heads, 2 key/value groups, head dim 2: rows [q0 q0 q1 q1 ... | k.. | v..].
  const ShardSpec spec = ShardSpec::split(0, {{8, 4}, {4, 2}, {4, 2}});
  EXPECT_EQ(held({16, 5}, spec, 2, 1), (std::vector<int64_t>{4, 5, 6, 7, 10, 11, 14, 15}));
  EXPECT_EQ(tp_local_shape({16, 5}, spec, 2), (Shape{8, 5}));
}

TEST(Shard, FewerGroupsThanRanksAreReplicated) {
  // 2 key/value groups over 4 ranks: ranks 0,1 hold group 0, ranks 2,3 group 1.
  const ShardSpec spec = ShardSpec::split(0, {{4, 2}});
  for (int r = 0; r < 4; ++r) {
    const auto pieces = tp_pieces({4, 3}, spec, 4, r);
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].global_begin, (r / 2) * 2);
    EXPECT_EQ(pieces[0].length, 2);
    EXPECT_EQ(pieces[0].replicas, 2);
    EXPECT_EQ(pieces[0].replica_rank, r % 2);
  }
}

TEST(Shard, UnsplittableSectionThrows) {
  EXPECT_THROW(tp_pieces({6, 2}, ShardSpec::split(0, {{6, 3}}), 2, 0), Error);
}

TEST(Shard, ShardsInitialiseFromGlobalCoordinates) {
  // Every rank's shard of a fused, column-split and vector parameter holds exactly the values of
  // the corresponding global elements.
  for (int tp = 1; tp <= 4; tp *= 2) {
    ParameterSet full, part0(tp, tp - 1);
    for (ParameterSet* s : {&full, &part0}) {
      s->add("w", {16, 6}, InitKind::kNormal, 1.0f, true, ShardSpec::split(0, {{8, 4}, {8, 4}}));
      s->add("o", {6, 8}, InitKind::kNormal, 1.0f, true, ShardSpec::split(1));
      s->add("b", {8}, InitKind::kNormal, 1.0f, false, ShardSpec::split(0));
      s->allocate(DType::kF32, 5);
    }
    for (const char* name : {"w", "o", "b"}) {
      const Parameter& p = part0.get(name);
      const Parameter& g = full.get(name);
      const int64_t lcols = p.local_shape.back(), gcols = g.global_shape.back();
      const bool vector = p.local_shape.size() == 1;
      for (int64_t i = 0; i < p.numel(); ++i) {
        int64_t r = vector ? 0 : i / lcols, c = vector ? i : i % lcols;
        if (p.shard.tp_dim == 0 && !vector) r = p.global_index(r);
        else c = p.global_index(c);
        EXPECT_EQ(p.value.data<float>()[i], g.value.data<float>()[r * gcols + c]) << name << i;
      }
    }
  }
}

// initial_values over ranges that start and end inside rows, on the threads' path (4096 elements
// or more) and below it, of column-split shards whose columns are not multiples of 4 (a Philox
// block straddles them): every value is init_value's at its global coordinates. Parameters of no
// elements allocate; constant kinds are their constant.
TEST(Shard, InitialValuesOfAnyRangeAreInitValues) {
  for (int tp = 1; tp <= 2; ++tp) {
    ParameterSet set(tp, tp - 1);
    set.add("w", {67, 130}, InitKind::kNormal, 0.5f, true, ShardSpec::split(1));
    set.add("rows", {90, 61}, InitKind::kNormal, 0.5f, true, ShardSpec::split(0));
    set.add("empty", {3, 0}, InitKind::kNormal, 0.5f, true);
    set.add("nothing", {0}, InitKind::kNormal, 0.5f, true);
    set.add("ones", {5}, InitKind::kOnes, 0.0f, false);
    set.allocate(DType::kF32, 11);
    for (const char* name : {"w", "rows", "empty", "nothing", "ones"}) {
      const Parameter& p = set.get(name);
      const int64_t cols = p.local_shape.back();
      const bool split_rows = p.shard.tp_dim == 0;
      for (const auto& [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
               {0, p.numel()},
               {std::min<int64_t>(7, p.numel()), p.numel()},
               {p.numel() / 3, p.numel() / 3 + std::min<int64_t>(p.numel() / 3, 100)}}) {
        std::vector<float> out(static_cast<size_t>(hi - lo), -1.0f);
        set.initial_values(p, out.data(), lo, hi);
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t r = i / cols, c = i % cols;
          const float expected = ParameterSet::init_value(p, 11, split_rows ? p.global_index(r) : r,
                                                          split_rows ? c : p.global_index(c));
          ASSERT_EQ(out[i - lo], expected)
              << name << " at " << i << " of [" << lo << ", " << hi << "), tp " << tp;
          ASSERT_EQ(p.value.data<float>()[i], expected) << name << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::model
