// DeepSpeed JSON configs mapped onto tessera-train's arguments, and DeepSpeed's LR schedulers.
#include "tessera/train/deepspeed_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <set>

#include "tessera/core/error.h"
#include "tessera/train/deepspeed_keys.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

// Parses the flags (as tessera-train would) with a ds config holding `json`, then applies it.
struct Applied {
  TrainArgs args;
  std::vector<std::string> warnings, info;
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
  DeepSpeedApplied applied = apply_deepspeed_config(a.args, dp);
  a.warnings = std::move(applied.warnings);
  a.info = std::move(applied.info);
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
  EXPECT_NE(
      error_of(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50}}})")
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

TEST(DeepSpeedConfig, UnknownKeysFailNoEffectKeysWarnOnceAndBadValuesFail) {
  // Unknown keys are errors naming the key (they used to be warnings: a typo ran on silently).
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": 0, "round_robin_gradient": true}})")
                .find("unknown key 'zero_optimization.round_robin_gradient'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"gradient_accumulation_dtype": "fp32"})")
                .find("unknown key 'gradient_accumulation_dtype'"),
            std::string::npos);
  // A no-effect key: one warning per table row, however many keys of its block are present.
  const auto a = apply(R"({"zero_optimization": {"stage": 0, "round_robin_gradients": true},
                           "flops_profiler": {"enabled": true, "profile_step": 3}})");
  ASSERT_EQ(a.warnings.size(), 2u);  // in key order (nlohmann::json sorts a file's keys)
  EXPECT_NE(a.warnings[0].find("flops_profiler has no effect"), std::string::npos);
  EXPECT_NE(a.warnings[1].find("zero_optimization.round_robin_gradients has no effect"),
            std::string::npos);
  // A refused key: accepted at its inert value, an error naming it otherwise.
  EXPECT_EQ(error_of(R"({"zero_optimization": {"zero_quantized_weights": false}})"), "");
  EXPECT_NE(error_of(R"({"zero_optimization": {"zero_quantized_weights": true}})")
                .find("zero_optimization.zero_quantized_weights true is not supported: ZeRO++ "
                      "quantized weights are not implemented"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"compression_training": {"layer_reduction": {"enabled": true}}})")
                .find("compression_training.layer_reduction {\"enabled\":true} is not supported: "
                      "DeepSpeed Compression"),
            std::string::npos);
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

// A Hugging Face Trainer config (transformers' ds_config_zero3.json, offload removed): every
// "auto" takes the flag's value, or the model's hidden size, as HfTrainerDeepSpeedConfig fills it.
TEST(DeepSpeedConfig, AutoValuesResolveAsHuggingFaceFillsThem) {
  const auto a = apply(R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
        "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": true},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false})",
                       {"--model",
                        "gpt2-tiny",
                        "--micro-batch-size",
                        "2",
                        "--global-batch-size",
                        "12",
                        "--lr",
                        "3e-4",
                        "--adam-beta1",
                        "0.8",
                        "--adam-eps",
                        "1e-6",
                        "--weight-decay",
                        "0.05",
                        "--clip-grad",
                        "0.7",
                        "--train-iters",
                        "20",
                        "--lr-warmup-fraction",
                        "0.22",
                        "--bf16"},
                       /*dp=*/3);
  EXPECT_EQ(a.args.micro_batch_size, 2);
  EXPECT_EQ(a.args.global_batch_size, 12);  // accumulation 12 / (2 x 3) = 2
  EXPECT_TRUE(a.args.bf16);
  EXPECT_FALSE(a.args.fp16);
  EXPECT_DOUBLE_EQ(a.args.lr, 3e-4);
  EXPECT_DOUBLE_EQ(a.args.adam_beta1, 0.8);
  EXPECT_DOUBLE_EQ(a.args.adam_beta2, 0.999);  // the flag's default
  EXPECT_DOUBLE_EQ(a.args.adam_eps, 1e-6);
  EXPECT_DOUBLE_EQ(a.args.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(a.args.clip_grad, 0.7);
  EXPECT_EQ(a.args.zero_stage, 3);
  EXPECT_EQ(a.args.ddp_bucket_size, 64 * 64);                 // hidden^2, hidden 64
  EXPECT_EQ(a.args.stage3_prefetch_bucket_size, 3686);        // int(0.9 x 4096 = 3686.4)
  EXPECT_EQ(a.args.stage3_param_persistence_threshold, 640);  // 10 x hidden
  ASSERT_TRUE(a.args.deepspeed_schedule.has_value());
  const optim::DeepSpeedScheduleOptions& o = *a.args.deepspeed_schedule;
  EXPECT_DOUBLE_EQ(o.warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(o.warmup_max_lr, 3e-4);
  EXPECT_EQ(o.total_num_steps, 20);
  EXPECT_EQ(o.warmup_num_steps, 5);  // ceil(0.22 x 20 = 4.4), Hugging Face's warmup_ratio rule
  bool lr_line = false;
  for (const std::string& line : a.info)
    lr_line |= line == "optimizer.params.lr \"auto\" = 0.0003 (--lr)";
  EXPECT_TRUE(lr_line);
  // sub_group_size is the optimizer offload's swap unit (no offload here: read, no warning);
  // two no-effect rows warn.
  EXPECT_EQ(a.args.offload_sub_group_size, 1'000'000'000);
  EXPECT_EQ(a.warnings.size(), 2u);  // stage3_max_reuse_distance, 16-bit save
}

TEST(DeepSpeedConfig, AnAutoThatCannotBeResolvedIsRefusedWithTheKey) {
  EXPECT_NE(error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})")
                .find("optimizer.params.lr is \"auto\" but --lr is not given"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"zero_optimization": {"stage": "auto"}})")
                .find("zero_optimization.stage is \"auto\", which Tessera cannot resolve"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"scheduler": {"type": "WarmupDecayLR",
                                       "params": {"total_num_steps": "auto"}}})",
                     {"--train-samples", "64"})
                .find("scheduler.params.total_num_steps is \"auto\" but neither "
                      "--lr-decay-iters nor --train-iters is given"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"train_batch_size": 10, "gradient_accumulation_steps": "auto"})",
                     {"--micro-batch-size", "2"})
                .find("gradient_accumulation_steps is \"auto\" but train_batch_size 10 is not "
                      "divisible by micro 2 x DP 2"),
            std::string::npos);
}

TEST(DeepSpeedConfig, TheLegacyBfloat16KeyRunsInBf16) {
  EXPECT_TRUE(apply(R"({"bfloat16": {"enabled": true}})").args.bf16);
  EXPECT_FALSE(apply(R"({"bfloat16": {"enabled": false}})").args.bf16);
  EXPECT_NE(error_of(R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": true}})")
                .find("both bf16 and its legacy spelling bfloat16 are given"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"bfloat16": {"enabled": true}, "fp16": {"enabled": true}})")
                .find("fp16 and bf16 are both enabled"),
            std::string::npos);
}

TEST(DeepSpeedConfig, SgdAndItsRefusedVariants) {
  auto a = apply(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.5,
                                                             "weight_decay": 1e-4}}})");
  EXPECT_EQ(a.args.optimizer, "sgd");
  EXPECT_DOUBLE_EQ(a.args.lr, 0.1);
  EXPECT_DOUBLE_EQ(a.args.sgd_momentum, 0.5);
  EXPECT_DOUBLE_EQ(a.args.weight_decay, 1e-4);
  a = apply(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "nesterov": false}}})");
  EXPECT_DOUBLE_EQ(a.args.sgd_momentum, 0.0);  // torch.optim.SGD's default
  EXPECT_NE(error_of(R"({"optimizer": {"type": "SGD", "params": {"nesterov": true}}})")
                .find("optimizer.params.nesterov true is not supported: Nesterov momentum is not "
                      "implemented (only false)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "SGD", "params": {"betas": [0.9, 0.99]}}})")
                .find("optimizer.params.betas is not a parameter of SGD"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"optimizer": {"type": "SGD"}})", {"--optimizer", "adam"})
                .find("optimizer SGD contradicts --optimizer adam"),
            std::string::npos);
}

TEST(DeepSpeedConfig, OneCycleCyclesAdamsBeta1AndTurnsItselfOffForSgd) {
  auto a = apply(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1,
                     "cycle_max_lr": 1.1, "cycle_first_step_size": 4}}})");
  ASSERT_TRUE(a.args.deepspeed_schedule.has_value());
  EXPECT_TRUE(a.args.deepspeed_schedule->cycle_momentum);
  EXPECT_DOUBLE_EQ(a.args.lr, 1.1);  // the scheduler sets the rate: no --lr needed
  a = apply(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.1,
                              "cycle_max_lr": 1.1}}})");
  EXPECT_FALSE(a.args.deepspeed_schedule->cycle_momentum);
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_NE(a.warnings[0].find("cycle_momentum true has no effect with SGD"), std::string::npos);
  EXPECT_NE(error_of(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 1}}})")
                .find("scheduler.params.cycle_min_lr is required by OneCycle"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"cycle_max_lr": 1}}})")
                .find("scheduler.params.cycle_max_lr is not a parameter of WarmupLR"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"scheduler": {"type": "LRRangeTest", "params": {}}})")
                .find("'LRRangeTest' is not supported"),
            std::string::npos);
}

TEST(DeepSpeedConfig, ActivationCheckpointingTurnsOnFullRecompute) {
  auto a = apply(R"({"activation_checkpointing": {"partition_activations": true,
                     "contiguous_memory_optimization": false, "cpu_checkpointing": false}})",
                 {"--num-layers", "6"});
  EXPECT_EQ(a.args.recompute_granularity, "full");
  EXPECT_EQ(a.args.recompute_method, "uniform");
  EXPECT_EQ(a.args.recompute_num_layers, 1);  // every layer keeps only its input
  EXPECT_EQ(a.warnings.size(), 3u);           // each no-effect key named once
  // number_checkpoints N per rank: groups of ceil(layers per pipeline rank / N).
  a = apply(R"({"activation_checkpointing": {"number_checkpoints": 2}})", {"--num-layers", "6"});
  EXPECT_EQ(a.args.recompute_num_layers, 3);
  a = apply(R"({"activation_checkpointing": {"number_checkpoints": 4}})", {"--num-layers", "6"});
  EXPECT_EQ(a.args.recompute_num_layers, 2);  // ceil(6 / 4): at most 4 checkpoints
  EXPECT_NE(
      error_of(R"({"activation_checkpointing": {}})", {"--recompute-granularity", "selective"})
          .find("contradicts --recompute-granularity selective"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"activation_checkpointing": {"number_checkpoints": 2}})",
                     {"--num-layers", "6", "--recompute-granularity", "full", "--recompute-method",
                      "uniform", "--recompute-num-layers", "1"})
                .find("number_checkpoints 2 (uniform groups of 3 layers) contradicts"),
            std::string::npos);
}

// communication_data_type is the type the gradients' reductions send and sum in
// (ShardingPlan::grad_reduce_dtype; train/sharding.cc takes --grad-reduce-in-bf16 first);
// accumulation stays fp32, so grad_accum_dtype is fp32 only.
TEST(DeepSpeedConfig, CommunicationDataTypeIsTheReductionsTypeAccumulationIsFp32) {
  EXPECT_EQ(error_of(R"({"communication_data_type": "fp32", "data_types": {"grad_accum_dtype":
                         "fp32"}, "prescale_gradients": true, "gradient_predivide_factor": 2})"),
            "");
  EXPECT_EQ(apply("{}").args.communication_data_type, DType::kF32);
  // Absent under bf16: fp32, and one line saying DeepSpeed would have reduced in bf16.
  const auto absent = apply(R"({"bf16": {"enabled": true}})");
  EXPECT_EQ(absent.args.communication_data_type, DType::kF32);
  EXPECT_EQ(std::count_if(absent.info.begin(), absent.info.end(),
                          [](const std::string& line) {
                            return line.find(
                                       "communication_data_type: absent, so gradients are "
                                       "reduced in fp32 (DeepSpeed would reduce them in "
                                       "bf16)") != std::string::npos;
                          }),
            1);
  EXPECT_TRUE(
      apply(R"({"bf16": {"enabled": true}, "communication_data_type": "fp32"})").info.empty());
  EXPECT_EQ(apply(R"({"communication_data_type": "bf16"})").args.communication_data_type,
            DType::kBF16);
  EXPECT_EQ(apply(R"({"communication_data_type": "fp16"})").args.communication_data_type,
            DType::kF16);
  EXPECT_EQ(apply(R"({"communication_data_type": "bf16"})", {"--grad-reduce-in-bf16"})
                .args.communication_data_type,
            DType::kBF16);
  EXPECT_NE(error_of(R"({"communication_data_type": "fp16"})", {"--grad-reduce-in-bf16"})
                .find("communication_data_type \"fp16\" contradicts --grad-reduce-in-bf16"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"communication_data_type": "int8"})")
                .find("must be \"fp32\", \"fp16\" or \"bf16\", got \"int8\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"data_types": {"grad_accum_dtype": "fp16"}})")
                .find("data_types.grad_accum_dtype \"fp16\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"gradient_predivide_factor": 0})").find("must be > 0"), std::string::npos);
}

// prescale_gradients and gradient_predivide_factor move DeepSpeed's division by DP before, around
// or after the sum. Tessera's gradients already carry the division (the loss is divided by the
// global batch's token count) when they are summed in fp32. The key table calls both "no
// effect": here the three orders on the same fp32 gradients of 4 and 3 ranks.
TEST(DeepSpeedConfig, TheOrderOfGradientScalingChangesOnlyTheRounding) {
  for (const int dp : {4, 3}) {
    for (const float f : {1.0f, 2.0f, 3.0f}) {
      double max_rel = 0;
      bool bitwise = true;
      for (int i = 0; i < 1000; ++i) {
        float prescaled = 0, predivided = 0;  // Tessera's order = prescale; DeepSpeed's default
        for (int r = 0; r < dp; ++r) {
          const float g =
              std::sin(0.37f * float(i * dp + r + 1)) * std::pow(2.0f, float(i % 20 - 10));
          prescaled += g * (1.0f / float(dp));
          predivided += g / f;
        }
        predivided *= f / float(dp);
        bitwise &= prescaled == predivided;
        double mag = 0;
        for (int r = 0; r < dp; ++r)
          mag += std::abs(std::sin(0.37f * float(i * dp + r + 1)) *
                          std::pow(2.0f, float(i % 20 - 10)) / dp);
        max_rel = std::max(max_rel, std::abs(double(prescaled) - double(predivided)) / mag);
      }
      // Powers of two (DP 4, f 1 or 2) scale exactly: the same bits. Otherwise each order's error
      // is within the summation bound (dp + 2) u of the summed magnitudes (u = 2^-24), so the two
      // differ by at most twice that.
      if (dp == 4 && f != 3.0f) {
        EXPECT_TRUE(bitwise) << "dp " << dp << " f " << f;
      }
      EXPECT_LT(max_rel, 2.0 * (dp + 2) * std::pow(2.0, -24)) << "dp " << dp << " f " << f;
    }
  }
}

TEST(DeepSpeedKeys, TheTableCoversTheParserAndCountsItself) {
  const DeepSpeedKeyCounts c = deepspeed_key_counts();
  EXPECT_EQ(c.implemented + c.no_effect + c.refused, deepspeed_key_table().size());
  std::set<std::string_view> paths;
  for (const DeepSpeedKey& row : deepspeed_key_table()) {
    EXPECT_TRUE(paths.insert(row.path).second) << "duplicate row " << row.path;
    EXPECT_FALSE(row.reason.empty()) << row.path;
    if (!row.inert.empty()) {
      EXPECT_EQ(row.kind, DeepSpeedKeyClass::kRefused) << row.path;
    }
  }
  EXPECT_EQ(find_deepspeed_key("amp.opt_level")->path, "amp.*");
  EXPECT_EQ(find_deepspeed_key("amp.enabled")->path, "amp.enabled");
  EXPECT_EQ(find_deepspeed_key("zero_optimization"), nullptr);
  EXPECT_NE(deepspeed_key_markdown().find("| `bfloat16.enabled` | implemented | --bf16 |"),
            std::string::npos);
  // Every implemented key at once: the parser reads each (Section::check_read aborts otherwise).
  const auto a = apply(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "steps_per_print": 5,
    "wall_clock_breakdown": true, "communication_data_type": "fp32",
    "data_types": {"grad_accum_dtype": "fp32"},
    "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                             "weight_decay": 0.1, "adam_w_mode": true}},
    "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
        "decay_lr_rate": 0.1, "cycle_first_step_size": 5, "cycle_second_step_size": 5,
        "decay_step_size": 2, "cycle_momentum": true, "cycle_min_mom": 0.85,
        "cycle_max_mom": 0.95, "decay_mom_rate": 0.01}},
    "fp16": {"enabled": false, "loss_scale": 0, "initial_scale_power": 16,
             "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "allgather_bucket_size": 5e8, "overlap_comm": true,
        "reduce_bucket_size": 5e8, "contiguous_gradients": true,
        "offload_param": {"device": "none"}, "offload_optimizer": {"device": "none"},
        "stage3_max_live_parameters": 1e9, "stage3_prefetch_bucket_size": 5e7,
        "stage3_param_persistence_threshold": 1e5},
    "activation_checkpointing": {"number_checkpoints": 1},
    "tensorboard": {"enabled": false, "output_path": "tb", "job_name": "j"}})");
  EXPECT_TRUE(a.args.bf16);
  EXPECT_TRUE(a.warnings.empty());
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

// DeepSpeed's OneCycle (lr_schedules.py) by hand: F 4, S 6 (N 10), lr 0.1..1.1, momentum
// 0.8..0.9, decay_lr_rate 0.5 and decay_mom_rate 0.1 every 2 iterations after the cycle.
TEST(DeepSpeedSchedules, OneCycleFollowsDeepSpeedsFormula) {
  optim::DeepSpeedScheduleOptions o;
  o.type = optim::DeepSpeedScheduleType::kOneCycle;
  o.cycle_min_lr = 0.1;
  o.cycle_max_lr = 1.1;
  o.cycle_first_step_size = 4;
  o.cycle_second_step_size = 6;
  o.decay_lr_rate = 0.5;
  o.decay_step_size = 2;
  o.cycle_min_mom = 0.8;
  o.cycle_max_mom = 0.9;
  o.decay_mom_rate = 0.1;
  const optim::DeepSpeedLRSchedule s(o);
  // x = 1 + b/N - floor(1 + b/N) keeps DeepSpeed's rounding: exact to ~1e-15, not to the bit.
  constexpr double kTol = 1e-12;
  // iteration s (b = s + 1) -> (x, fraction f, lr = 0.1 + f, beta1 = 0.9 - 0.1 f)
  EXPECT_NEAR(s.value_at_iteration(0), 0.35, kTol);   // x 0.1 <= 0.4: f 0.25
  EXPECT_NEAR(s.value_at_iteration(2), 0.85, kTol);   // x 0.3: f 0.75
  EXPECT_NEAR(s.value_at_iteration(3), 1.1, kTol);    // x 0.4: f 1, the peak
  EXPECT_NEAR(s.value_at_iteration(6), 0.6, kTol);    // x 0.7: f (0.7 - 1) / (0.4 - 1) = 0.5
  EXPECT_NEAR(s.value_at_iteration(9), 0.1, kTol);    // b = N: x 0, back to the minimum
  EXPECT_NEAR(s.value_at_iteration(10), 0.08, kTol);  // decay d (10-10+1)/2: 0.1 / 1.25
  EXPECT_NEAR(s.value_at_iteration(13), 0.05, kTol);  // d 2: 0.1 / 2
  // Update 0 runs with the constructor's values; update u >= 1 with iteration u - 1's.
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_NEAR(s.lr_at(1), 0.35, kTol);
  EXPECT_NEAR(s.lr_at(4), 1.1, kTol);
  const auto beta = [&](int64_t u) { return s.betas_at(u).value(); };
  EXPECT_DOUBLE_EQ(beta(0).first, 0.8);  // cycle_min_mom, set by the constructor
  EXPECT_NEAR(beta(1).first, 0.875, kTol);
  EXPECT_NEAR(beta(4).first, 0.8, kTol);
  EXPECT_NEAR(beta(7).first, 0.85, kTol);
  EXPECT_NEAR(beta(11).first, 0.9 * 1.05, kTol);  // iteration 10: d 0.5
  EXPECT_DOUBLE_EQ(beta(7).second, 0.99);         // DeepSpeed's OneCycle sets beta2 0.99
  o.cycle_momentum = false;
  EXPECT_FALSE(optim::DeepSpeedLRSchedule(o).betas_at(3).has_value());
  o.decay_step_size = 0;  // no decay: the minimum after the cycle
  o.cycle_momentum = true;
  EXPECT_DOUBLE_EQ(optim::DeepSpeedLRSchedule(o).value_at_iteration(20), 0.1);
  EXPECT_DOUBLE_EQ(optim::DeepSpeedLRSchedule(o).betas_at(21)->first, 0.9);
}

}  // namespace
}  // namespace tessera::train
