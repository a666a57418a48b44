// Trainer's data setup (contract in trainer.h): the GPT datasets or the mock stream, the
// document-mask options, resuming. Kept apart from the step loop in trainer.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/data/gpt_dataset.h"
#include "tessera/data/tokenizer.h"
#include "tessera/train/trainer.h"

namespace tessera::train {
namespace {

// Entropy (nats/token) of the token frequencies in [0, last_token) of the dataset, over at most
// the first 16M tokens: the loss of the best model that ignores context. Throws tessera::Error
// for a token outside [0, vocab).
double unigram_entropy(const data::IndexedDataset& ds, int64_t last_token, int64_t vocab) {
  std::vector<int64_t> counts(vocab, 0);
  std::vector<int32_t> buf;
  int64_t seen = 0;
  const int64_t limit = std::min<int64_t>(last_token, 16 << 20);
  for (int64_t s = 0; s < ds.num_sequences() && seen < limit; ++s) {
    const int64_t len = std::min(ds.sequence_length(s), limit - seen);
    buf.resize(len);
    ds.get(s, 0, len, buf.data());
    for (int64_t i = 0; i < len; ++i) {
      const int32_t t = buf[i];
      // This pass reads the head of the data anyway: report a bad token now, not hours later.
      if (t < 0 || t >= vocab)
        throw Error(ds.bin_path() + ": token " + std::to_string(t) + " at sequence " +
                    std::to_string(s) + ", offset " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(vocab) +
                    ") (--vocab-size or the tokenizer's)");
      ++counts[t];
    }
    seen += len;
  }
  double h = 0;
  for (int64_t c : counts)
    if (c > 0) h -= (double(c) / seen) * std::log(double(c) / seen);
  return h;
}

// Where the data comes from: --data-path with --split, or the per-split paths.
data::DataSpec data_spec(const TrainArgs& a) {
  data::DataSpec spec;
  if (!a.data_path.empty()) {
    spec.blend = data::parse_blend(a.data_path, "--data-path");
    spec.split = split_fractions(a.split);
  } else {
    spec.per_split[0] = data::parse_blend(a.train_data_path, "--train-data-path");
    if (!a.valid_data_path.empty())
      spec.per_split[1] = data::parse_blend(a.valid_data_path, "--valid-data-path");
    if (!a.test_data_path.empty())
      spec.per_split[2] = data::parse_blend(a.test_data_path, "--test-data-path");
  }
  return spec;
}

// Megatron's document flags (EOD masks and positions); none without a tokenizer.
data::LtorOptions ltor_options(const TrainArgs& a) {
  data::LtorOptions ltor;
  if (a.tokenizer_type.empty()) return ltor;
  // Recorded by resolve_argument_files; loaded here only when it was not (see TrainArgs).
  ltor.eod = a.tokenizer_eod ? *a.tokenizer_eod : data::make_tokenizer(tokenizer_options(a))->eod();
  ltor.eod_mask_loss = a.eod_mask_loss;
  ltor.reset_position_ids = a.reset_position_ids;
  ltor.reset_attention_mask = a.reset_attention_mask;
  return ltor;
}

}  // namespace

void Trainer::build_data() {
  const auto& a = args_;
  const int64_t T = a.model.seq_length, vocab = a.model.vocab_size;
  // Megatron's sample counts: every training sample; every validation pass takes the next
  // eval_iters global batches ((train_iters / eval_interval + 1) passes at most); test: one pass.
  const int64_t gbs = a.global_batch_size;
  const int64_t train_samples = batches_.samples_after(train_iters_);  // ramps and steps too
  const int64_t passes = a.eval_interval > 0 ? train_iters_ / a.eval_interval + 1 : 1;
  const int64_t valid_samples = passes * a.eval_iters * gbs;
  ltor_ = ltor_options(a);
  if (a.mock_data) {
    // One Markov chain; validation samples are drawn after all training samples.
    auto mock =
        std::make_unique<data::MockSampler>(vocab, T, seed_, train_samples + valid_samples);
    std::printf("> mock data: vocab %lld, entropy rate %.3f nats/token (uniform: %.3f)\n",
                static_cast<long long>(vocab), mock->entropy_rate(), std::log(double(vocab)));
    train_data_ = std::move(mock);
    return;
  }
  const data::DataSpec spec = data_spec(a);
  data::GPTDatasetOptions options;
  options.seq_length = T;
  options.vocab_size = vocab;
  options.seed = seed_;
  options.cache_dir = a.data_cache_path;
  // Rank 0 builds and writes missing indices; the others wait, then map them (Megatron's
  // build-on-rank-0-then-barrier).
  const std::array<int64_t, 3> sizes = {train_samples, a.eval_iters > 0 ? valid_samples : 0,
                                        a.eval_iters * gbs};
  const bool builder = reporting_rank_;
  std::array<std::unique_ptr<data::TokenSampler>, 3> sets;
  if (builder) {
    options.mode = data::CacheMode::kBuildIfMissing;
    sets = data::build_gpt_datasets(spec, sizes, options);
  }
  if (world_) world_->barrier().wait();  // the cache is complete
  if (!builder) {
    options.mode = data::CacheMode::kLoadOnly;
    sets = data::build_gpt_datasets(spec, sizes, options);
  }
  train_data_ = std::move(sets[0]);
  valid_data_ = std::move(sets[1]);
  test_data_ = std::move(sets[2]);
  if (!train_data_ || train_data_->num_samples() < 1)
    throw Error("the training split of --split '" + a.split + "' holds no sample of --seq-length " +
                std::to_string(T) + " + 1 tokens");
  if (!valid_data_ && a.eval_interval > 0 && a.eval_iters > 0)
    std::printf(
        "> no validation data (--split '%s' gives the validation split no sample): no "
        "evaluation\n",
        a.split.c_str());
  const std::string first_prefix =
      spec.blend ? spec.blend->prefixes[0] : spec.per_split[0]->prefixes[0];
  const data::IndexedDataset head(first_prefix);
  unigram_entropy_ = unigram_entropy(head, head.num_tokens(), vocab);
  std::printf(
      "> data: %s; train %lld samples, valid %lld samples, test %lld samples (indices cached in "
      "%s); "
      "unigram entropy of %s %.3f nats/token\n",
      spec.blend ? ("--data-path " + std::to_string(spec.blend->prefixes.size()) +
                    " prefix(es), --split " + a.split)
                       .c_str()
                 : "--train/valid/test-data-path",
      static_cast<long long>(train_data_->num_samples()),
      static_cast<long long>(valid_data_ ? valid_data_->num_samples() : 0),
      static_cast<long long>(test_data_ ? test_data_->num_samples() : 0),
      a.data_cache_path.empty() ? "PREFIX/cache/GPTDataset_indices" : a.data_cache_path.c_str(),
      first_prefix.c_str(), unigram_entropy_);
}

void Trainer::resume_at(int64_t iteration, int64_t consumed_samples) {
  TESSERA_CHECK(iteration >= 0 && consumed_samples >= 0 && !prefetcher_);
  start_iteration_ = iteration;
  consumed_samples_ = consumed_samples;
  // The validation passes already run (one every eval_interval iterations) took their samples:
  // the next pass continues after them, as Megatron's restored validation iterator does.
  evaluations_ = args_.eval_interval > 0 ? iteration / args_.eval_interval : 0;
}

}  // namespace tessera::train
