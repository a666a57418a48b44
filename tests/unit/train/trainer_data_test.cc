// The trainer's data path: GPTDataset from --data-path, resuming at consumed samples.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/data/byte_tokenizer.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/micro_batch.h"
#include "tessera/train/trainer.h"
#include "testing/numeric.h"
#include "testing/temp_dir.h"

namespace tessera::train {
namespace {

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::string write_corpus(const testing::TempDir& dir) {
  data::ByteTokenizer tok;
  const std::string prefix = dir.file("corpus");
  data::IndexedDatasetWriter w(prefix, data::IndexDType::kUInt16);
  for (int i = 0; i < 60; ++i) {
    std::vector<int32_t> ids = tok.encode("document " + std::to_string(i * 37 % 101) + " says hi");
    ids.push_back(tok.eod());
    w.add_document(ids);
  }
  w.finalize();
  return prefix;
}

TrainArgs data_args(const testing::TempDir& dir, const std::string& prefix,
                    const std::string& metrics) {
  TrainArgs a;
  a.model = model::preset("llama-tiny");
  a.model.seq_length = 16;
  a.model.max_position_embeddings = 16;
  a.model.vocab_size = 257;
  a.tokenizer_type = "ByteLevel";
  a.data_path = {prefix};
  a.data_cache_path = dir.file("cache");
  a.eod_mask_loss = a.reset_position_ids = a.reset_attention_mask = true;
  a.train_iters = 4;
  a.lr = 0;  // the weights never change, so an iteration's loss depends only on its data
  a.micro_batch_size = 2;
  a.global_batch_size = 4;
  a.eval_interval = 2;  // validation at iterations 2 and 4, each pass on the next samples
  a.eval_iters = 1;
  a.log_interval = 1000;
  a.metrics_file = metrics;
  return a;
}

TEST(TrainerData, ResumingAtConsumedSamplesContinuesTheSameSequence) {
  testing::TempDir dir;
  const std::string prefix = write_corpus(dir);
  const TrainArgs whole = data_args(dir, prefix, dir.file("whole.jsonl"));
  Trainer(whole).train();
  const TrainArgs resumed_args = data_args(dir, prefix, dir.file("resumed.jsonl"));
  Trainer resumed(resumed_args);
  resumed.resume_at(2, 2 * resumed_args.global_batch_size);
  EXPECT_EQ(resumed.train(), 4);
  const auto a = read_metrics(whole.metrics_file), b = read_metrics(resumed_args.metrics_file);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(b[i]["iteration"], a[i + 2]["iteration"]);
    EXPECT_EQ(b[i]["consumed_samples"], a[i + 2]["consumed_samples"]);
    // The same samples through the same weights and kernels: bitwise the same loss.
    EXPECT_EQ(double(b[i]["lm_loss"]), double(a[i + 2]["lm_loss"])) << "iteration " << i + 3;
  }
  // The resumed run's validation at iteration 4 takes the second pass's samples, as the
  // uninterrupted run's did (the first pass, at iteration 2, happened before the resume).
  ASSERT_TRUE(a[3].contains("val_loss") && b[1].contains("val_loss"));
  EXPECT_EQ(double(b[1]["val_loss"]), double(a[3]["val_loss"]));
  // Different iterations (and validation passes) saw different samples.
  EXPECT_NE(double(a[0]["lm_loss"]), double(a[1]["lm_loss"]));
  EXPECT_NE(double(a[1]["val_loss"]), double(a[3]["val_loss"]));
  EXPECT_TRUE(a[0].contains("data_wait_s"));
}

TEST(TrainerData, MicroBatchSizeDoesNotChangeTheGlobalBatch) {
  // MBS 4 vs 2 x 2 accumulated: the same samples per iteration, so the same loss up to the
  // order of the fp32 sums.
  testing::TempDir dir;
  const std::string prefix = write_corpus(dir);
  TrainArgs one = data_args(dir, prefix, dir.file("one.jsonl"));
  one.micro_batch_size = 4;
  const TrainArgs two = data_args(dir, prefix, dir.file("two.jsonl"));
  Trainer(one).train();
  Trainer(two).train();
  const auto a = read_metrics(one.metrics_file), b = read_metrics(two.metrics_file);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double la = a[i]["lm_loss"], lb = b[i]["lm_loss"];
    EXPECT_NEAR(la, lb, 1e-6 * la) << "iteration " << i + 1;
  }
}

TEST(TrainerData, EodMaskLossGradientIsTheMeanOverCountedTokens) {
  // SGD without momentum, decay or clipping, lr 1: the update is the gradient. It must be that of
  // loss_sum / (tokens the mask counts) over the global batch, computed here on a fresh model.
  testing::TempDir dir;
  const std::string prefix = write_corpus(dir);
  TrainArgs a = data_args(dir, prefix, dir.file("m.jsonl"));
  a.reset_position_ids = a.reset_attention_mask = false;
  a.train_iters = 1;
  a.eval_iters = 0;
  a.optimizer = "sgd";
  a.sgd_momentum = 0;
  a.weight_decay = 0;
  a.clip_grad = 0;
  a.lr = 1.0;
  a.lr_decay_style = "constant";
  Trainer t(a);
  const Tensor& w = t.model().params().flat_values();
  const std::vector<float> w0(w.data<float>(), w.data<float>() + w.numel());
  t.train();

  model::GPTModel ref(a.model, DType::kF32, a.seed);
  data::DataSpec spec;
  spec.blend = data::parse_blend(a.data_path, "--data-path");
  spec.split = split_fractions(a.split);
  data::GPTDatasetOptions o;
  o.seq_length = a.model.seq_length;
  o.vocab_size = a.model.vocab_size;
  o.seed = a.seed;
  o.cache_dir = a.data_cache_path;
  auto sets = data::build_gpt_datasets(spec, {a.global_batch_size, 0, 0}, o);
  data::MicroBatch mb;
  data::LtorOptions lo;
  lo.eod = data::ByteTokenizer::kEod;
  lo.eod_mask_loss = true;
  data::load_micro_batch(*sets[0], 0, a.global_batch_size, lo, mb);
  double counted = 0;
  for (float m : mb.loss_mask) counted += m;
  ASSERT_LT(counted, static_cast<double>(mb.loss_mask.size())) << "no EOD in the batch";
  model::Batch batch{mb.tokens.data(), mb.targets.data(), mb.loss_mask.data(), mb.B, mb.T};
  ref.params().zero_grads();
  ref.forward_backward(batch, ref.context(mb.B, mb.T, 0, a.seed, 1, true),
                       static_cast<float>(1.0 / counted));
  const float* g = ref.params().flat_grads().data<float>();
  std::vector<float> update(w0.size());
  std::vector<double> expected(w0.size());
  for (size_t i = 0; i < w0.size(); ++i) {
    update[i] = w0[i] - w.data<float>()[i];
    expected[i] = g[i];
  }
  // The trainer sums two micro-batches of 2 (the reference one of 4) and rounds w0 - g in fp32:
  // ~1e-6 of the gradient's scale. Dividing by all GBS*T tokens instead would be off by the
  // masked fraction (here a few percent).
  EXPECT_LT(testing::max_scaled_error(update, expected), 1e-4);
  EXPECT_GT(1.0 - counted / mb.loss_mask.size(), 1e-2) << "too few EODs to tell the two apart";
}

}  // namespace
}  // namespace tessera::train
