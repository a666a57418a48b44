// The inference engine against the model's own full forward: cached logits equal the full
// recomputation at every step (fp32, 1e-5), chunked prefill and batching change no token,
// prompt log-probabilities are the training loss, a seeded request draws the same tokens alone
// and in a batch of mixed requests, and invalid requests are refused naming the field.
// (tests/cli/generate.sh checks greedy continuations against an independent float64 forward.)
#include "tessera/inference/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/model/chunk_runner.h"
#include "testing/llama_style.h"

namespace tessera::inference {
namespace {

using model::GPTModel;
using model::ModelConfig;

ModelConfig small_gpt() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 48;
  c.vocab_size = 61;
  c.make_vocab_size_divisible_by = 16;  // 61 -> 64: the padded logits must never be chosen
  c.init_method_std = 0.2f;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

ModelConfig small_llama(int window = 0) {
  ModelConfig c = small_gpt();
  testing::make_llama_style(c, 2);
  c.ffn_hidden_size = 48;
  c.sliding_window = window;
  return c;
}

// The logits (fp32, real vocabulary) of the last token of `tokens` by a full forward.
std::vector<float> full_logits(GPTModel& m, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> targets(T, 0);
  const model::Batch batch{tokens.data(), targets.data(), nullptr, 1, T};
  const model::StepContext ctx = m.context(1, T, 0, 0, 0, /*training=*/false);
  const Tensor hidden = model::ChunkRunner(m).forward_chunk(0, Tensor(), batch, ctx, nullptr);
  const Tensor logits = m.logits(hidden.slice_rows(T - 1, T), 1);
  const float* row = logits.data<float>();
  return std::vector<float>(row, row + m.config().vocab_size);
}

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab, int salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i)
    p.push_back(static_cast<int32_t>((11 * i + 5 * salt + 3) % vocab));
  return p;
}

std::vector<int32_t> tokens_of(const Generation& g) {
  std::vector<int32_t> out;
  for (const GeneratedToken& t : g.tokens) out.push_back(t.token);
  return out;
}

// One thread: these tests run thousands of tiny kernels (a token at a time), and under ctest -j2
// beside another process a second OpenMP thread spins for a core it does not get (measured: the
// greedy test 68 ms alone, 20 s so). Results do not depend on the thread count.
class InferenceEngine : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(1); }
};

// Runs the engine until every request finished.
void drain(Engine& e) {
  for (int guard = 0; !e.idle() && guard < 10000; ++guard) e.step();
  ASSERT_TRUE(e.idle());
}

// The prompt's log-probabilities by an engine with options `o` (and, when `cache_bytes` is
// given, the engine's cache size).
std::vector<double> prompt_logprobs(GPTModel& m, const std::vector<int32_t>& prompt,
                                    const EngineOptions& o, int64_t* cache_bytes = nullptr) {
  Engine e(m, o);
  if (cache_bytes != nullptr) *cache_bytes = e.cache().bytes();
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.prompt_logprobs = true;
  const uint64_t id = e.submit(r);
  drain(e);
  return e.generation(id).prompt_logprobs;
}

TEST_F(InferenceEngine, CachedLogitsEqualFullRecomputationAtEveryStep) {
  for (const ModelConfig& c : {small_gpt(), small_llama(), small_llama(/*window=*/6)}) {
    GPTModel m(c, DType::kF32, 7);
    const std::vector<int32_t> prompt = prompt_of(9, c.vocab_size, 1);
    // The cache path directly: the prompt in chunks of 4, 4 and 1, then 14 greedy tokens.
    KvCache cache(c.num_layers, 2 * int64_t{c.kv_heads()} * c.head_dim(), model::KvElement::kF32, 5,
                  8);
    std::vector<int32_t> blocks, tokens = prompt;
    ASSERT_TRUE(cache.reserve(blocks, 24));
    int64_t cached = 0;
    double worst = 0;
    while (tokens.size() < 24) {
      const int64_t rows = std::min<int64_t>(4, static_cast<int64_t>(tokens.size()) - cached);
      std::vector<int32_t> pos(rows);
      for (int64_t i = 0; i < rows; ++i) pos[i] = static_cast<int32_t>(cached + i);
      const std::vector<model::CachedSequence> seqs = {{rows, cached, &blocks}};
      const Tensor h = m.forward_cached(tokens.data() + cached, pos.data(), rows, cache, seqs);
      cached += rows;
      if (cached < static_cast<int64_t>(tokens.size())) continue;  // the prompt's next chunk
      const Tensor l = m.logits(h.slice_rows(rows - 1, rows), 1);
      const std::vector<float> ref = full_logits(m, tokens);
      float scale = 0;
      for (float x : ref) scale = std::max(scale, std::fabs(x));
      for (size_t v = 0; v < ref.size(); ++v)
        worst = std::max(worst, std::fabs(double(l.data<float>()[v]) - ref[v]) / scale);
      tokens.push_back(
          static_cast<int32_t>(std::max_element(ref.begin(), ref.end()) - ref.begin()));
    }
    EXPECT_LT(worst, 1e-5) << "window " << c.sliding_window << ", swiglu " << c.swiglu;
  }
}

TEST_F(InferenceEngine, GreedyTokensFollowTheFullForwardWhateverTheChunkAndBatch) {
  const ModelConfig c = small_llama();
  GPTModel m(c, DType::kF32, 3);
  const std::vector<int32_t> prompt = prompt_of(11, c.vocab_size, 2);
  // Reference: argmax of the full forward, token by token.
  std::vector<int32_t> ref, seq = prompt;
  for (int k = 0; k < 16; ++k) {
    const std::vector<float> l = full_logits(m, seq);
    ref.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    seq.push_back(ref.back());
  }
  for (int64_t chunk : {1, 3, 512}) {
    EngineOptions o;
    o.block_size = 4;
    o.prefill_chunk = chunk;
    Engine e(m, o);
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = 16;
    r.sampling.temperature = 0;
    const uint64_t id = e.submit(r);
    // Others of different lengths in the same batch.
    for (int k = 0; k < 3; ++k) {
      GenerationRequest other;
      other.prompt = prompt_of(3 + 5 * k, c.vocab_size, 10 + k);
      other.max_tokens = 4 + 7 * k;
      other.sampling.seed = 100 + k;
      e.submit(other);
    }
    drain(e);
    EXPECT_EQ(tokens_of(e.generation(id)), ref) << "prefill chunk " << chunk;
    EXPECT_EQ(e.generation(id).finish, FinishReason::kLength);
    EXPECT_EQ(e.cache().free_blocks(), e.cache().num_blocks());  // every block back
  }
}

TEST_F(InferenceEngine, PromptLogprobsAreTheTrainingLoss) {
  const ModelConfig c = small_gpt();
  GPTModel m(c, DType::kF32, 5);
  const std::vector<int32_t> prompt = prompt_of(20, c.vocab_size, 3);
  EngineOptions o;
  o.prefill_chunk = 7;
  const std::vector<double> lp = prompt_logprobs(m, prompt, o);
  ASSERT_EQ(lp.size(), prompt.size() - 1);
  double sum = 0;
  for (double x : lp) sum -= x;
  // The training loss of the same tokens: inputs prompt[0..P-2], targets prompt[1..P-1].
  const int64_t T = static_cast<int64_t>(prompt.size()) - 1;
  std::vector<int32_t> in(prompt.begin(), prompt.end() - 1),
      target(prompt.begin() + 1, prompt.end());
  const model::Batch batch{in.data(), target.data(), nullptr, 1, T};
  const model::LossSum loss = m.forward_loss(batch, m.context(1, T, 0, 0, 0, false));
  EXPECT_NEAR(sum, loss.loss_sum, 1e-5 * loss.loss_sum);
}

// --kv-cache-dtype: keys and values rounded to the cache's type when written, read back exactly
// by both attention paths — a prompt fed a token at a time (the decode kernel) and in one chunk
// (the block kernel on widened blocks) give the same prompt log-probabilities to fp32 rounding;
// they move from the fp32 cache's by the rounding (more for fp8 than bf16), and the cache takes
// a half or a quarter of the bytes.
TEST_F(InferenceEngine, CacheElementTypesRoundKeysAndValuesOnceForBothAttentionPaths) {
  const ModelConfig c = small_llama();
  GPTModel m(c, DType::kF32, 13);
  const std::vector<int32_t> prompt = prompt_of(30, c.vocab_size, 4);
  auto logprobs = [&](const std::string& dtype, int64_t chunk, int64_t* bytes) {
    EngineOptions o;
    o.block_size = 4;
    o.prefill_chunk = chunk;
    o.kv_cache_dtype = dtype;
    return prompt_logprobs(m, prompt, o, bytes);
  };
  int64_t fp32_bytes = 0, bytes = 0;
  const std::vector<double> exact = logprobs("auto", 512, &fp32_bytes);
  double bf16_shift = 0, fp8_shift = 0;
  for (const std::string dtype : {"bf16", "fp8_e4m3", "fp8_e5m2"}) {
    const std::vector<double> chunked = logprobs(dtype, 512, &bytes);
    EXPECT_EQ(bytes * (dtype == "bf16" ? 2 : 4), fp32_bytes) << dtype;
    const std::vector<double> one_by_one = logprobs(dtype, 1, &bytes);
    ASSERT_EQ(chunked.size(), exact.size());
    double paths = 0, shift = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      paths = std::max(paths, std::fabs(chunked[i] - one_by_one[i]));
      shift = std::max(shift, std::fabs(chunked[i] - exact[i]));
    }
    EXPECT_LT(paths, 1e-5) << dtype;  // measured: 1.3e-6 to 1.8e-6
    // Rounded (not the fp32 values), and only rounded: bf16 keeps 8 significant bits, e4m3 4
    // and e5m2 3, so their shifts grow by about 2^4 and 2^5 (measured: 0.008, 0.17, 0.24).
    if (dtype == "bf16") {
      EXPECT_GT(shift, 1e-4);
      EXPECT_LT(shift, 0.02);
      bf16_shift = shift;
    } else {
      EXPECT_GT(shift, 4 * bf16_shift) << dtype;
      EXPECT_LT(shift, 100 * bf16_shift) << dtype;
      EXPECT_GT(shift, fp8_shift) << dtype << " (e5m2 is the coarser)";
      fp8_shift = shift;
    }
  }
  EXPECT_THROW(logprobs("fp4", 512, &bytes), Error);

  // A bf16 model: the prompt path widens fp8 blocks to bf16 (exact) — the two paths agree to
  // bf16 arithmetic, near the bf16 cache's values; a 16-bit cache of the other 16-bit type is
  // refused (fp16 keeps bits bf16 cannot).
  GPTModel m16(c, DType::kBF16, 13);
  auto logprobs16 = [&](const std::string& dtype, int64_t chunk) {
    EngineOptions o;
    o.block_size = 4;
    o.prefill_chunk = chunk;
    o.kv_cache_dtype = dtype;
    return prompt_logprobs(m16, prompt, o);
  };
  const std::vector<double> bf16_cache = logprobs16("auto", 512),
                            fp8_chunked = logprobs16("fp8", 512), fp8_single = logprobs16("fp8", 1);
  double paths = 0, shift = 0;
  for (size_t i = 0; i < bf16_cache.size(); ++i) {
    paths = std::max(paths, std::fabs(fp8_chunked[i] - fp8_single[i]));
    shift = std::max(shift, std::fabs(fp8_chunked[i] - bf16_cache[i]));
  }
  EXPECT_LT(paths, 0.05);
  EXPECT_GT(shift, paths);
  EXPECT_LT(shift, 0.5);
  EXPECT_THROW(logprobs16("fp16", 512), Error);
}

TEST_F(InferenceEngine, ASeededRequestDrawsTheSameTokensAloneAndInAMixedBatch) {
  const ModelConfig c = small_gpt();
  GPTModel m(c, DType::kF32, 9);
  GenerationRequest seeded;
  seeded.prompt = prompt_of(6, c.vocab_size, 4);
  seeded.max_tokens = 20;
  seeded.sampling.temperature = 0.9;
  seeded.sampling.top_p = 0.95;
  seeded.sampling.seed = 1234;
  Engine alone(m, {});
  const uint64_t a = alone.submit(seeded);
  drain(alone);
  EngineOptions o;
  o.max_sequences = 8;
  Engine batch(m, o);
  std::vector<uint64_t> ids;
  for (int k = 0; k < 8; ++k) {
    GenerationRequest r = seeded;
    if (k != 5) {  // the others: other prompts, lengths and sampling
      r.prompt = prompt_of(2 + 3 * k, c.vocab_size, 20 + k);
      r.max_tokens = 3 + 4 * k;
      r.sampling.temperature = k % 3 == 0 ? 0.0 : 0.5 + 0.2 * k;
      r.sampling.top_k = k % 2 ? 5 : 0;
      r.sampling.seed = 7 * k;
    }
    ids.push_back(batch.submit(r));
  }
  drain(batch);
  EXPECT_EQ(tokens_of(batch.generation(ids[5])), tokens_of(alone.generation(a)));
  // And another seed draws other tokens (the draw does depend on the seed).
  Engine other(m, {});
  seeded.sampling.seed = 99;
  const uint64_t b = other.submit(seeded);
  drain(other);
  EXPECT_NE(tokens_of(other.generation(b)), tokens_of(alone.generation(a)));
}

TEST_F(InferenceEngine, StopTokensAndTheContextEndAGeneration) {
  const ModelConfig c = small_gpt();
  GPTModel m(c, DType::kF32, 11);
  Engine e(m, {});
  GenerationRequest r;
  r.prompt = prompt_of(5, c.vocab_size, 6);
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  const uint64_t first = e.submit(r);
  drain(e);
  const int32_t stop = e.generation(first).tokens[2].token;
  r.stop_tokens = {stop};
  const uint64_t stopped = e.submit(r);
  r.stop_tokens.clear();
  r.max_tokens = 1000;  // beyond the context of 48: ends there
  const uint64_t long_one = e.submit(r);
  drain(e);
  const Generation& g = e.generation(stopped);
  EXPECT_EQ(g.finish, FinishReason::kStop);
  EXPECT_EQ(g.tokens.back().token, stop);
  EXPECT_LE(g.tokens.size(), 3u);
  EXPECT_EQ(e.generation(long_one).finish, FinishReason::kLength);
  EXPECT_EQ(e.generation(long_one).tokens.size(), 48u - 5u);
}

TEST_F(InferenceEngine, InvalidRequestsAreRefusedNamingTheField) {
  const ModelConfig c = small_gpt();
  GPTModel m(c, DType::kF32, 1);
  Engine e(m, {});
  const auto refused = [&](GenerationRequest r, const std::string& field) {
    try {
      e.submit(r);
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(field), std::string::npos) << err.what();
      return;
    }
    ADD_FAILURE() << "accepted a request with a bad " << field;
  };
  GenerationRequest ok;
  ok.prompt = {1, 2, 3};
  GenerationRequest r = ok;
  r.prompt.clear();
  refused(r, "prompt");
  r = ok;
  r.prompt[1] = 61;
  refused(r, "prompt");
  r = ok;
  r.prompt.assign(48, 1);
  refused(r, "prompt");
  r = ok;
  r.max_tokens = 0;
  refused(r, "max_tokens");
  r = ok;
  r.sampling.top_p = 1.5;
  refused(r, "top_p");
  r = ok;
  r.sampling.temperature = -1;
  refused(r, "temperature");
  EXPECT_TRUE(e.idle());
}

}  // namespace
}  // namespace tessera::inference
