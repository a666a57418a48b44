// DeepSpeed JSON configs mapped onto tessera-train's arguments, and DeepSpeed's LR schedulers.
#include "tessera/train/deepspeed_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>

#include "tessera/core/error.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

// Parses the flags (as tessera-train would) with a ds config holding `json`, then applies it.
struct Applied {
  TrainArgs args;
  std::vector<std::string> warnings;
};
Applied apply(const std::string& json, std::vector<std::string> flags = {}, int64_t dp = 2) {
  static testing::TempDir dir;
  const std::string path = dir.file("ds.json");
  std::ofstream(path) << json;
  std::vector<const char*> argv = {"tessera-train", "--deepspeed", "--deepspeed_config",
                                   path.c_str()};
  for (const auto& f : flags) argv.push_back(f.c_str());
  Applied a;
  EXPECT_TRUE(parse_arguments(static_cast<int>(argv.size()), argv.data(), a.args));
  a.warnings = apply_deepspeed_config(a.args, dp);
  return a;
}

std::string error_of(const std::string& json, std::vector<std::string> flags = {}) {
  try {
    apply(json, flags);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeepSpeedConfig, AnyTwoBatchKeysDetermineTheThird) {
  auto a = apply(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  EXPECT_EQ(a.args.global_batch_size, 32);
  EXPECT_EQ(a.args.micro_batch_size, 4);  // accumulation 32 / (4 x 2) = 4
  a = apply(R"({"train_batch_size": 32, "gradient_accumulation_steps": 8})");
  EXPECT_EQ(a.args.micro_batch_size, 2);
  a = apply(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})");
  EXPECT_EQ(a.args.global_batch_size, 30);
  a = apply(R"({"train_batch_size": 16})");
  EXPECT_EQ(a.args.micro_batch_size, 8);
}

TEST(DeepSpeedConfig, AnExplicitFlagIsOneOfTheTwoValues) {
  auto a = apply(R"({"train_batch_size": 8})", {"--micro-batch-size", "2"});  // accumulation 2
  EXPECT_EQ(a.args.micro_batch_size, 2);
  EXPECT_EQ(a.args.global_batch_size, 8);
  a = apply(R"({"optimizer": {"type": "Adam"}})", {"--zero-stage", "2"});  // no stage in the file
  EXPECT_EQ(a.args.zero_stage, 2);
  a = apply(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.02}}})");
  EXPECT_DOUBLE_EQ(a.args.lr, 0.02);  // the scheduler sets the rate: no --lr needed
  EXPECT_NE(error_of(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50}}})")
                .find("WarmupCosineLR scales the optimizer's learning rate"),
            std::string::npos);
}

TEST(DeepSpeedConfig, InconsistentBatchKeysAreAnError) {
  EXPECT_NE(error_of(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                         "gradient_accumulation_steps": 4})")
                .find("train_batch_size 30 != train_micro_batch_size_per_gpu 4 x "
                      "gradient_accumulation_steps 4 x data-parallel size 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_micro_batch_size_per_gpu": 4})", {"--micro-batch-size", "2"})
                .find("train_micro_batch_size_per_gpu 4 contradicts --micro-batch-size 2"),
            std::string::npos);
}

TEST(DeepSpeedConfig, SectionsMapOntoTheFlags) {
  const auto a = apply(R"({
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {"stage": 1, "reduce_bucket_size": 5e7, "overlap_comm": true},
    "fp16": {"enabled": true, "initial_scale_power": 12, "hysteresis": 3},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "weight_decay": 0.1}},
    "gradient_clipping": 0.5, "steps_per_print": 7})");
  EXPECT_EQ(a.args.zero_stage, 1);
  EXPECT_EQ(a.args.ddp_bucket_size, 50'000'000);
  EXPECT_TRUE(a.args.overlap_grad_reduce);
  EXPECT_TRUE(a.args.fp16);
  EXPECT_EQ(a.args.initial_loss_scale, 4096.0);
  EXPECT_EQ(a.args.hysteresis, 3);
  EXPECT_DOUBLE_EQ(a.args.lr, 3e-4);
  EXPECT_DOUBLE_EQ(a.args.adam_beta1, 0.8);
  EXPECT_DOUBLE_EQ(a.args.adam_beta2, 0.95);
  EXPECT_DOUBLE_EQ(a.args.adam_eps, 1e-8);
  EXPECT_DOUBLE_EQ(a.args.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(a.args.clip_grad, 0.5);
  EXPECT_EQ(a.args.log_interval, 7);
  EXPECT_TRUE(a.warnings.empty());
}

TEST(DeepSpeedConfig, DeepSpeedDefaultsApplyUnlessAFlagWasGiven) {
  auto a = apply(R"({"zero_optimization": {"stage": 1}})");
  EXPECT_DOUBLE_EQ(a.args.clip_grad, 0.0);   // DeepSpeed's code default, not Megatron's 1.0
  EXPECT_FALSE(a.args.overlap_grad_reduce);  // overlap_comm: on for stage 3 only
  EXPECT_EQ(a.args.log_interval, 10);
  a = apply(R"({"zero_optimization": {"stage": 1}})", {"--clip-grad", "1.0"});
  EXPECT_DOUBLE_EQ(a.args.clip_grad, 1.0);
}

TEST(DeepSpeedConfig, UnknownKeysWarnAndBadValuesFail) {
  const auto a = apply(R"({"zero_optimization": {"stage": 0, "round_robin_gradients": true},
                           "flops_profiler": {}})");
  ASSERT_EQ(a.warnings.size(), 2u);
  EXPECT_NE(a.warnings[0].find("unknown key 'zero_optimization.round_robin_gradients'"),
            std::string::npos);
  EXPECT_NE(a.warnings[1].find("unknown key 'flops_profiler'"), std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": "two"}})")
                .find("zero_optimization.stage must be a whole number, got \"two\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 5}})").find("must be 0, 1, 2 or 3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "Lamb"}})").find("'Lamb' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 0}})", {"--zero-stage", "1"})
                .find("contradicts the flags' ZeRO stage 1"),
            std::string::npos);
}

TEST(DeepSpeedSchedules, FollowDeepSpeedsFormulas) {
  optim::DeepSpeedScheduleOptions o;
  o.warmup_min_lr = 0.1;
  o.warmup_max_lr = 1.1;
  o.warmup_num_steps = 10;
  optim::DeepSpeedLRSchedule warmup(o);  // log warmup
  EXPECT_DOUBLE_EQ(warmup.value_at_iteration(0), 0.1);
  EXPECT_DOUBLE_EQ(warmup.value_at_iteration(4), 0.1 + std::log(5.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(warmup.value_at_iteration(10), 1.1);
  o.log_warmup = false;
  o.type = optim::DeepSpeedScheduleType::kWarmupDecayLR;
  o.total_num_steps = 30;
  optim::DeepSpeedLRSchedule decay(o);
  EXPECT_DOUBLE_EQ(decay.value_at_iteration(5), 0.1 + 0.5);
  EXPECT_DOUBLE_EQ(decay.value_at_iteration(20), 0.1 + 0.5);  // (30 - 20) / (30 - 10)
  EXPECT_DOUBLE_EQ(decay.value_at_iteration(40), 0.1);
  o.type = optim::DeepSpeedScheduleType::kWarmupCosineLR;
  o.base_lr = 2.0;
  o.warmup_min_ratio = 0.5;
  o.cos_min_ratio = 0.1;
  optim::DeepSpeedLRSchedule cosine(o);
  EXPECT_DOUBLE_EQ(cosine.value_at_iteration(4), 2.0 * (0.5 + 0.5 * 0.4));
  const double c = (1 + std::cos(std::numbers::pi * 11.0 / 20.0)) / 2;  // step 20: (20-10+1)/20
  EXPECT_DOUBLE_EQ(cosine.value_at_iteration(20), 2.0 * (0.1 + 0.9 * c));
  // DeepSpeed steps the scheduler after the optimizer: update u uses iteration max(0, u - 1).
  EXPECT_DOUBLE_EQ(cosine.lr_at(0), cosine.value_at_iteration(0));
  EXPECT_DOUBLE_EQ(cosine.lr_at(1), cosine.value_at_iteration(0));
  EXPECT_DOUBLE_EQ(cosine.lr_at(21), cosine.value_at_iteration(20));
  EXPECT_THROW(optim::DeepSpeedLRSchedule([] {
                 optim::DeepSpeedScheduleOptions bad;
                 bad.type = optim::DeepSpeedScheduleType::kWarmupDecayLR;
                 return bad;
               }()),
               Error);
}

}  // namespace
}  // namespace tessera::train
