#include "tessera/pipeline/partition.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::pipeline {
namespace {

TEST(PipelinePartition, UniformUnevenAndVirtual) {
  EXPECT_EQ(partition_layers({8, 4, 1, -1, -1}), (std::vector<int>{2, 2, 2, 2}));
  // First stage 1 layer, the other 3 stages share the remaining 9.
  EXPECT_EQ(partition_layers({10, 4, 1, 1, -1}), (std::vector<int>{1, 3, 3, 3}));
  EXPECT_EQ(partition_layers({10, 4, 1, 2, 2}), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(partition_layers({5, 2, 1, -1, 2}), (std::vector<int>{3, 2}));
  // 16 layers, P 4, V 2: 8 model chunks of 2; rank 0 holds layers [0,2) and [8,10)
  // (Megatron's example: GPU0 gets layers 1,2 and 9,10 counting from 1).
  const PartitionOptions o{16, 4, 2, -1, -1};
  const auto counts = partition_layers(o);
  EXPECT_EQ(counts, std::vector<int>(8, 2));
  const model::ModelPart r0 = part_of_rank(o, counts, 0);
  EXPECT_EQ(r0.chunks, (std::vector<std::pair<int, int>>{{0, 2}, {8, 10}}));
  EXPECT_TRUE(r0.embedding);
  EXPECT_FALSE(r0.head);
  const model::ModelPart r3 = part_of_rank(o, counts, 3);
  EXPECT_EQ(r3.chunks, (std::vector<std::pair<int, int>>{{6, 8}, {14, 16}}));
  EXPECT_FALSE(r3.embedding);
  EXPECT_TRUE(r3.head);
}

TEST(PipelinePartition, BadSplitsAreErrors) {
  EXPECT_THROW(partition_layers({6, 4, 1, -1, -1}), Error);  // not divisible
  EXPECT_THROW(partition_layers({2, 4, 1, -1, -1}), Error);  // more stages than layers
  EXPECT_THROW(partition_layers({8, 2, 3, -1, -1}), Error);  // V*P does not divide
  EXPECT_THROW(partition_layers({8, 4, 1, 7, -1}), Error);   // leaves 1 for 3 stages
  EXPECT_THROW(partition_layers({8, 2, 1, 3, 3}), Error);    // does not add up
  EXPECT_THROW(partition_layers({8, 2, 2, 3, -1}), Error);   // uneven with virtual stages
  EXPECT_THROW(partition_layers({8, 2, 1, 0, -1}), Error);   // a stage without layers
}

TEST(PipelinePartition, VirtualStagesFromLayersPerVirtualStage) {
  EXPECT_EQ(virtual_stages_for(16, 4, 0), 1);  // not interleaved
  EXPECT_EQ(virtual_stages_for(16, 4, 2), 2);
  EXPECT_EQ(virtual_stages_for(16, 2, 1), 8);
  try {
    virtual_stages_for(6, 2, 2);
    FAIL() << "6 layers do not split into 2 stages x 2 layers per virtual stage";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--num-layers 6 is not divisible by --pipeline-model-parallel-size 2 x "
                 "--num-layers-per-virtual-pipeline-stage 2");
  }
}

}  // namespace
}  // namespace tessera::pipeline
