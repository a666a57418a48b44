// Trainer-level tests: gradient accumulation invariance, NaN handling, and the metrics file.
#include "tessera/train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

TrainArgs tiny_args(const std::string& metrics_file) {
  TrainArgs a;
  a.model = model::preset("llama-tiny");
  a.model.seq_length = 16;
  a.model.max_position_embeddings = 16;
  a.mock_data = true;
  a.train_iters = 3;
  a.lr = 1e-2;
  a.lr_decay_style = "constant";
  a.micro_batch_size = 8;
  a.global_batch_size = 8;
  a.eval_iters = 0;
  a.log_interval = 1000;
  a.metrics_file = metrics_file;
  return a;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// 1 micro-batch of 8 vs 4 micro-batches of 2: the same global batch, only the summation order
// of the fp32 gradients differs. Returns the largest relative weight difference after 3 steps.
double accumulation_weight_difference(const std::string& optimizer, double lr) {
  testing::TempDir dir;
  TrainArgs one = tiny_args(dir.file("one.jsonl"));
  TrainArgs four = tiny_args(dir.file("four.jsonl"));
  one.optimizer = four.optimizer = optimizer;
  one.lr = four.lr = lr;
  four.micro_batch_size = 2;
  Trainer t1(one), t4(four);
  t1.train();
  t4.train();
  const auto m1 = read_metrics(one.metrics_file), m4 = read_metrics(four.metrics_file);
  EXPECT_EQ(m1.size(), 3u);
  EXPECT_EQ(m4.size(), 3u);
  for (size_t i = 0; i < std::min(m1.size(), m4.size()); ++i) {
    const double l1 = m1[i]["lm_loss"], l4 = m4[i]["lm_loss"];
    EXPECT_NEAR(l4, l1, 1e-5 * l1) << "iteration " << i + 1;
    const double g1 = m1[i]["grad_norm"], g4 = m4[i]["grad_norm"];
    EXPECT_NEAR(g4, g1, 1e-5 * g1) << "iteration " << i + 1;
  }
  const Tensor& w1 = t1.model().params().flat_values();
  const Tensor& w4 = t4.model().params().flat_values();
  double max_rel = 0;
  for (int64_t i = 0; i < w1.numel(); ++i) {
    const double a = w1.data<float>()[i], b = w4.data<float>()[i];
    max_rel = std::max(max_rel, std::fabs(a - b) / std::max(std::fabs(a), 1e-2));
  }
  return max_rel;
}

TEST(Trainer, GradientAccumulationMatchesOneLargeMicroBatch) {
  // SGD is linear in the gradient: the weights agree to fp32 rounding.
  EXPECT_LT(accumulation_weight_difference("sgd", 0.1), 1e-5);
  // Adam divides by sqrt(v): for elements whose gradient is at the fp32 rounding level of the
  // larger ones, m/sqrt(v) turns rounding noise into O(1) relative noise of a step of size lr.
  // That noise is bounded by lr per step: with lr 1e-3 and 3 steps the weights (floored at 1e-2)
  // agree within 1e-3 relative.
  EXPECT_LT(accumulation_weight_difference("adam", 1e-3), 1e-3);
}

TEST(Trainer, ClippingScalesTheUpdateByMaxNormOverNorm) {
  // Plain SGD (no momentum) makes the update lr * clip_coeff * g, so a clipped run equals an
  // unclipped run whose learning rate carries the coefficient Megatron computes,
  // max_norm / (norm + 1e-6).
  testing::TempDir dir;
  TrainArgs clipped = tiny_args(dir.file("c.jsonl"));
  clipped.optimizer = "sgd";
  clipped.sgd_momentum = 0;
  clipped.weight_decay = 0;
  clipped.lr = 0.1;
  clipped.train_iters = 1;
  clipped.clip_grad = 0.05;
  Trainer tc(clipped);
  tc.train();
  const double norm = read_metrics(clipped.metrics_file)[0]["grad_norm"];
  ASSERT_GT(norm, 0.05);  // clipping is active
  TrainArgs scaled = clipped;
  scaled.metrics_file = "";
  scaled.clip_grad = 0;
  scaled.lr = 0.1 * 0.05 / (norm + 1e-6);
  Trainer ts(scaled);
  ts.train();
  const Tensor& a = tc.model().params().flat_values();
  const Tensor& b = ts.model().params().flat_values();
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-7 + 1e-6 * std::fabs(b.data<float>()[i])) << i;
}

TEST(Trainer, LossFallsAndMetricsAreComplete) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.train_iters = 30;
  a.lr = 3e-3;
  a.eval_interval = 30;
  a.eval_iters = 2;
  Trainer t(a);
  EXPECT_EQ(t.train(), 30);
  const auto m = read_metrics(a.metrics_file);
  ASSERT_EQ(m.size(), 30u);
  for (const char* key :
       {"iteration", "consumed_samples", "lm_loss", "lr", "grad_norm", "loss_scale", "skipped",
        "iter_time_s", "tokens_per_s", "tflops_per_rank", "peak_mem_bytes", "gemm_s"})
    EXPECT_TRUE(m[0].contains(key)) << key;
  // The products' time is the iteration's own (not the run's so far), and part of it.
  for (const auto& row : m) {
    EXPECT_GT(row["gemm_s"].get<double>(), 0.0) << row["iteration"];
    EXPECT_LT(row["gemm_s"].get<double>(), row["iter_time_s"].get<double>()) << row["iteration"];
  }
  EXPECT_EQ(m[29]["consumed_samples"], 240);
  EXPECT_TRUE(m[29].contains("val_loss"));
  const double first = m[0]["lm_loss"], last = m[29]["lm_loss"];
  // The mock stream's next token is predictable; 30 AdamW steps must cut the loss clearly.
  EXPECT_LT(last, first - 1.0);
  EXPECT_NEAR(first, std::log(257.0), 0.3);  // an untrained model is near uniform
}

TEST(Trainer, NanGradientsStopTheRunWithoutTouchingWeights) {
  TrainArgs a = tiny_args("");
  a.train_iters = 2;
  a.inject_overflow_at = 2;
  Trainer t(a);
  try {
    t.train();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iteration 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.optimizer().steps(), 1);  // the first update only
  // The weights are exactly those after iteration 1 of the same run.
  TrainArgs one = tiny_args("");
  one.train_iters = 1;
  one.lr_decay_iters = 2;  // the same schedule as the two-iteration run
  Trainer reference(one);
  reference.train();
  const Tensor& w = t.model().params().flat_values();
  const Tensor& r = reference.model().params().flat_values();
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(w.data<float>()[i], r.data<float>()[i]) << i;
}

TEST(Trainer, TheLastIterationEndsWithAValidationPass) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.train_iters = 5;
  a.eval_interval = 1000;  // no periodic evaluation within 5 iterations
  a.eval_iters = 1;
  Trainer t(a);
  t.train();
  const auto m = read_metrics(a.metrics_file);
  ASSERT_EQ(m.size(), 5u);
  for (size_t i = 0; i + 1 < m.size(); ++i) EXPECT_FALSE(m[i].contains("val_loss"));
  EXPECT_TRUE(m.back().contains("val_loss"));
}

TEST(Trainer, ExitIntervalStopsWithoutAnExtraEvaluation) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.train_iters = 10;
  a.exit_interval = 3;
  a.eval_interval = 2;
  a.eval_iters = 1;
  Trainer t(a);
  EXPECT_EQ(t.train(), 3);
  const auto m = read_metrics(a.metrics_file);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_TRUE(m[1].contains("val_loss"));   // iteration 2: periodic
  EXPECT_FALSE(m[2].contains("val_loss"));  // iteration 3: exit, no evaluation
}

TEST(Trainer, SkipNanIterationsSkipsAndCounts) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.train_iters = 3;
  a.inject_overflow_at = 2;
  a.skip_nan_iterations = true;
  Trainer t(a);
  t.train();
  EXPECT_EQ(t.optimizer().steps(), 2);
  const auto m = read_metrics(a.metrics_file);
  EXPECT_EQ(m[1]["skipped"], true);
  EXPECT_EQ(m[2]["skipped"], false);
}

}  // namespace
}  // namespace tessera::train

namespace tessera::train {
namespace {

TEST(Trainer, Fp16TrainsWithTheLossScaleAdapting) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.fp16 = true;
  a.train_iters = 40;
  a.lr = 3e-3;
  a.initial_loss_scale = 1099511627776.0;  // 2^40: fp16 gradients overflow until it comes down
  a.loss_scale_window = 10;                // grows again after 10 clean steps
  Trainer t(a);
  t.train();
  const auto m = read_metrics(a.metrics_file);
  ASSERT_EQ(m.size(), 40u);
  int skipped = 0;
  double min_scale = 1e300, max_scale_after_min = 0;
  for (const auto& row : m) {
    skipped += row["skipped"].get<bool>() ? 1 : 0;
    const double s = row["loss_scale"];
    if (s < min_scale) {
      min_scale = s;
      max_scale_after_min = s;
    }
    max_scale_after_min = std::max(max_scale_after_min, s);
  }
  EXPECT_GT(skipped, 2);                          // overflows were detected and skipped
  EXPECT_LT(min_scale, 1099511627776.0);          // ... and the scale came down
  EXPECT_GT(max_scale_after_min, min_scale);      // ... and grew again after a clean window
  EXPECT_EQ(t.optimizer().steps(), 40 - skipped);
  const double first = m[0]["lm_loss"], last = m.back()["lm_loss"];
  EXPECT_LT(last, first - 1.0);
}

TEST(Trainer, Fp16ForcedOverflowIsSkippedAndLogged) {
  testing::TempDir dir;
  TrainArgs a = tiny_args(dir.file("m.jsonl"));
  a.fp16 = true;
  a.initial_loss_scale = 1024;
  a.hysteresis = 1;
  a.train_iters = 4;
  a.inject_overflow_at = 3;
  Trainer t(a);
  t.train();
  const auto m = read_metrics(a.metrics_file);
  EXPECT_EQ(m[2]["skipped"], true);
  EXPECT_EQ(m[1]["loss_scale"], 1024.0);
  EXPECT_EQ(m[2]["loss_scale"], 512.0);  // hysteresis 1: halved on the first overflow
  EXPECT_EQ(t.optimizer().steps(), 3);
}

}  // namespace
}  // namespace tessera::train
