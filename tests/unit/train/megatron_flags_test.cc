// Megatron's flags beyond the core table (megatron_flags.cc): the last occurrence of a flag wins
// (lists included), no-effect flags become notices, refused ones one error line, aliases resolve,
// and the batch schedules follow Megatron's num-microbatches calculators, worked by hand.
#include <gtest/gtest.h>

#include <fstream>

#include "tessera/core/error.h"
#include "tessera/train/arguments.h"
#include "tessera/train/batch_schedule.h"
#include "testing/parse_flags.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

TrainArgs parse(const std::vector<std::string>& flags) { return testing::parse_flags(flags); }

std::string parse_error(std::vector<std::string> flags) {
  try {
    parse(flags);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronFlags, TheLastOccurrenceWinsAsWithArgparse) {
  EXPECT_EQ(parse({"--lr", "1e-3", "--lr", "2e-3"}).lr, 2e-3);
  EXPECT_EQ(parse({"--num-layers", "8", "--num-layers", "2"}).model.num_layers, 2);
  EXPECT_FALSE(parse({"--overlap-grad-reduce", "--no-overlap-grad-reduce"}).overlap_grad_reduce);
  // Lists: the last occurrence's values only, not both appended.
  const TrainArgs a = parse({"--data-path", "A", "B", "--lr", "1", "--data-path", "C"});
  EXPECT_EQ(a.data_path, std::vector<std::string>{"C"});
  EXPECT_EQ(parse({"--rampup-batch-size", "16", "16", "100", "--rampup-batch-size", "4", "2", "8"})
                .rampup_batch_size,
            (std::vector<int64_t>{4, 2, 8}));
  EXPECT_EQ(parse({"--data-path=A", "--data-path", "B"}).data_path, std::vector<std::string>{"B"});
}

TEST(MegatronFlags, NoEffectFlagsAreNoticedAndRefusedOnesAreOneLine) {
  const TrainArgs a = parse({"--use-mcore-models", "--attention-backend", "fused", "--fp8-format",
                             "hybrid", "--wandb-project", "p"});
  ASSERT_EQ(a.notices.size(), 4u);
  EXPECT_EQ(a.notices[0].rfind("--use-mcore-models has no effect on this backend: ", 0), 0u);
  EXPECT_NE(a.notices[2].find("FP8"), std::string::npos);
  EXPECT_EQ(parse_error({"--qk-layernorm"}),
            "--qk-layernorm: normalisation of queries and keys is not implemented");
  EXPECT_NE(parse_error({"--no-such-flag"}), "");
  // A no-effect flag takes its value (it is not mistaken for a positional argument).
  EXPECT_EQ(parse({"--num-workers", "4", "--lr", "3"}).lr, 3);
}

TEST(MegatronFlags, AliasesResolve) {
  EXPECT_EQ(parse({"--recompute-activations"}).recompute_granularity, "selective");
  EXPECT_NE(parse_error({"--recompute-activations", "--recompute-granularity", "full"}), "");
  testing::TempDir dir;
  std::ofstream(dir.file("data.txt")) << "0.3 /a/b\n0.7 /c/d\n";
  EXPECT_EQ(parse({"--data-args-path", dir.file("data.txt")}).data_path,
            (std::vector<std::string>{"0.3", "/a/b", "0.7", "/c/d"}));
  const TrainArgs p = parse({"--profile"});
  EXPECT_EQ(p.timeline_file, "profile.json");
  EXPECT_EQ(p.profile_step_start, 10);  // Megatron's defaults
  EXPECT_EQ(p.profile_step_end, 12);
  EXPECT_NE(parse_error({"--profile", "--profile-step-start", "5", "--profile-step-end", "5"}), "");
  EXPECT_NE(parse_error({"--train-iters", "10", "--lr-decay-samples", "100"}), "");
  EXPECT_NE(
      parse_error({"--rampup-batch-size", "1", "1", "1", "--step-batch-size-schedule", "0:1"}), "");
}

TEST(MegatronFlags, TheMigrationTableCountsEveryClass) {
  const std::string t = migration_table();
  EXPECT_NE(t.find("| `--use-mcore-models` | Tessera has one model implementation |"),
            std::string::npos);
  EXPECT_NE(t.find("| `--qk-layernorm` |"), std::string::npos);
  EXPECT_NE(t.find("| `--rampup-batch-size` | training |"), std::string::npos);
  EXPECT_NE(t.find("### Tessera's own"), std::string::npos);
}

TEST(BatchSchedule, RampupFollowsMegatronsCalculator) {
  // 16 -> 64 by 16 over 300 samples: 3 increments, one per 100 samples; consumed > 300: 64.
  const BatchSchedule s = BatchSchedule::rampup(16, 16, 300, 64);
  EXPECT_EQ(s.at(0), 16);
  EXPECT_EQ(s.at(99), 16);
  EXPECT_EQ(s.at(100), 32);
  EXPECT_EQ(s.at(299), 48);
  EXPECT_EQ(s.at(300), 64);  // floor(300 / 100) = 3 increments
  EXPECT_EQ(s.at(301), 64);
  EXPECT_EQ(s.batches(), (std::vector<int64_t>{16, 32, 48, 64}));
  // Iterations: batches 16 x7 (0..96 -> 112), 32 x3 (112..176 -> 208), 48 x2 (208..256 -> 304);
  // then consumed 304 > 300: 64s. Megatron's update_train_iters counts the ramp while
  // consumed <= 300 (12 iterations, 304 samples) and (1000 - 304) // 64 = 10 more.
  EXPECT_EQ(s.iterations_for(1000), 22);
  EXPECT_EQ(s.samples_after(12), 304);
  EXPECT_EQ(s.samples_after(14), 304 + 128);
  EXPECT_THROW(BatchSchedule::rampup(16, 10, 300, 64), Error);  // 48 is not a multiple of 10
  EXPECT_TRUE(BatchSchedule::rampup(64, 16, 300, 64).is_constant());
}

TEST(BatchSchedule, StepsTakeTokenThresholds) {
  // Thresholds in tokens over sequence length 1000: 0 -> 8, 2000 samples -> 16, 3000 -> 32.
  const BatchSchedule s = BatchSchedule::steps("0:8 2M:16 3000K:32", 1000);
  EXPECT_EQ(s.at(0), 8);
  EXPECT_EQ(s.at(1999), 8);
  EXPECT_EQ(s.at(2000), 16);
  EXPECT_EQ(s.at(3000), 32);
  EXPECT_EQ(s.final_batch(), 32);
  // 250 iterations of 8 reach 2000; 63 of 16 reach 3008 (>= 3000); then (4000 - 3008) / 32 = 31.
  EXPECT_EQ(s.iterations_for(4000), 250 + 63 + 31);
  EXPECT_THROW(BatchSchedule::steps("1:8 2:16", 1), Error);   // must start at 0
  EXPECT_THROW(BatchSchedule::steps("0:8 0:16", 1), Error);   // must increase
  EXPECT_THROW(BatchSchedule::steps("0:8 1X:16", 1), Error);  // unknown suffix
}

}  // namespace
}  // namespace tessera::train
