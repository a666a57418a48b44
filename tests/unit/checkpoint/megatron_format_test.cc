// Megatron-LM checkpoints (legacy and torch_dist) are recognised from tiny fake directory trees
// laid out as Megatron saves them, and --load / tessera-convert refuse them with one line
// naming the format and the way through Hugging Face; Tessera's own checkpoints are not taken
// for them.
#include "tessera/checkpoint/megatron_format.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/hf_testing.h"
#include "tessera/checkpoint/convert.h"
#include "tessera/checkpoint/sharded_checkpoint.h"
#include "testing/temp_dir.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing_hf::error_of;
using testing_hf::write_text;

// save/latest_checkpointed_iteration.txt naming iteration 20, and save/iter_0000020/.
std::string megatron_tree(const testing::TempDir& dir, const std::string& tracker = "20\n") {
  const std::string save = dir.file("save");
  fs::create_directories(save + "/iter_0000020");
  write_text(save + "/latest_checkpointed_iteration.txt", tracker);
  return save;
}

TEST(MegatronFormat, LegacyTree) {
  testing::TempDir dir;
  const std::string save = megatron_tree(dir);
  fs::create_directories(save + "/iter_0000020/mp_rank_00_000");
  write_text(save + "/iter_0000020/mp_rank_00_000/model_optim_rng.pt", "pickle");
  EXPECT_EQ(megatron_checkpoint_format(save), "legacy");
  EXPECT_EQ(megatron_checkpoint_format(save + "/iter_0000020"), "legacy");
  EXPECT_EQ(megatron_checkpoint_format(save + "/iter_0000020/mp_rank_00_000"), "legacy");
  // A release checkpoint (tracker "release", directory release/).
  testing::TempDir other;
  const std::string rel = megatron_tree(other, "release");
  fs::create_directories(rel + "/release/mp_rank_00");
  write_text(rel + "/release/mp_rank_00/model_optim_rng.pt", "pickle");
  EXPECT_EQ(megatron_checkpoint_format(rel), "legacy");
}

TEST(MegatronFormat, TorchDistTree) {
  testing::TempDir dir;
  const std::string save = megatron_tree(dir);
  const std::string iter = save + "/iter_0000020";
  write_text(iter + "/__0_0.distcp", "data");
  EXPECT_EQ(megatron_checkpoint_format(save), "torch_dist");
  // Only the small metadata.json Megatron writes beside the shards.
  testing::TempDir only_json;
  const std::string s2 = megatron_tree(only_json);
  write_text(s2 + "/iter_0000020/metadata.json",
             R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                 "common_backend": "torch", "common_backend_version": 1})");
  EXPECT_EQ(megatron_checkpoint_format(s2), "torch_dist");
  EXPECT_EQ(megatron_checkpoint_format(s2 + "/iter_0000020"), "torch_dist");
  write_text(s2 + "/iter_0000020/metadata.json", R"({"iteration": 20, "ranks": 1})");
  EXPECT_EQ(megatron_checkpoint_format(s2), "");  // Tessera's metadata.json
  write_text(s2 + "/iter_0000020/common.pt", "pickle");
  EXPECT_EQ(megatron_checkpoint_format(s2), "torch_dist");
}

TEST(MegatronFormat, OtherDirectoriesAreNotMegatron) {
  testing::TempDir dir;
  EXPECT_EQ(megatron_checkpoint_format(dir.path()), "");
  EXPECT_EQ(megatron_checkpoint_format(dir.file("missing")), "");
  EXPECT_EQ(megatron_checkpoint_format(megatron_tree(dir)), "");  // an empty iteration
}

TEST(MegatronFormat, LoadAndConvertRefuseWithTheRoute) {
  testing::TempDir dir;
  const std::string save = megatron_tree(dir);
  write_text(save + "/iter_0000020/.metadata", "torch distributed checkpoint metadata");
  for (const std::string& msg :
       {error_of([&] { find_checkpoint(save); }),
        error_of([&] { convert_checkpoint_to_hf(save, dir.file("out"), 5'000'000'000); }),
        error_of([&] { convert_hf_to_checkpoint(save, dir.file("out2")); })}) {
    EXPECT_NE(msg.find(save + ": a Megatron-LM torch_dist checkpoint"), std::string::npos) << msg;
    EXPECT_NE(msg.find("convert it to a Hugging Face model directory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tools/checkpoint/convert.py"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("metadata.json does not exist"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tessera::checkpoint
