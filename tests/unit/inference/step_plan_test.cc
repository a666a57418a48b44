// Tensor-parallel serving's replication (step_plan.h) and the serving loop's accounting: a plan
// survives its wire format exactly and damaged words are refused; two engines that apply the
// same plans (one directly, one through the wire format) hand out the same ids, refuse the same
// requests and generate the same tokens; a stream closed mid-generation (a client gone) frees
// its cache blocks and is counted as aborted; GET /metrics shows those counters.
#include "tessera/inference/step_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/inference/serving.h"
#include "tessera/inference/serving_metrics.h"

namespace tessera::inference {
namespace {

model::ModelConfig tiny_gpt() {
  model::ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.vocab_size = 50;
  c.init_method_std = 0.2f;
  c.attention_dropout = 0.0f;
  c.hidden_dropout = 0.0f;
  return c;
}

GenerationRequest request(int salt, int64_t max_tokens) {
  GenerationRequest r;
  for (int i = 0; i < 3 + salt; ++i) r.prompt.push_back((7 * i + 3 * salt + 1) % 50);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.1 * salt + 0.7;  // not exact in binary: must still arrive exact
  r.sampling.top_k = salt % 3;
  r.sampling.top_p = 0.9;
  r.sampling.min_p = 0.01 * salt;
  r.sampling.repetition_penalty = 1.0 + 1.0 / 3.0;
  r.sampling.seed = (uint64_t{1} << 63) + salt;  // above int64's range
  r.stop_tokens = {salt, 49};
  r.prompt_logprobs = salt % 2 == 1;
  r.top_logprobs = salt;
  return r;
}

void expect_same(const GenerationRequest& a, const GenerationRequest& b) {
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.stop_tokens, b.stop_tokens);
  EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs);
  EXPECT_EQ(a.top_logprobs, b.top_logprobs);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);  // bit for bit
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.min_p, b.sampling.min_p);
  EXPECT_EQ(a.sampling.repetition_penalty, b.sampling.repetition_penalty);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
}

class StepPlans : public ::testing::Test {
 protected:
  void SetUp() override { set_num_threads(1); }  // tiny kernels: see engine_test.cc
};

TEST_F(StepPlans, APlanSurvivesItsWireFormatExactlyAndDamageIsRefused) {
  StepPlan plan;
  plan.submits = {request(1, 5), request(2, 9)};
  plan.finishes = {{3, FinishReason::kAbort}, {8, FinishReason::kLength}};
  const std::vector<int64_t> words = encode_plan(plan);
  const StepPlan back = decode_plan(words);
  ASSERT_EQ(back.submits.size(), 2u);
  for (int i = 0; i < 2; ++i) expect_same(back.submits[i], plan.submits[i]);
  EXPECT_EQ(back.finishes, plan.finishes);
  EXPECT_FALSE(back.stop);
  StepPlan stop;
  stop.stop = true;
  EXPECT_TRUE(decode_plan(encode_plan(stop)).stop);
  EXPECT_TRUE(decode_plan(encode_plan(StepPlan{})).empty());

  std::vector<int64_t> cut(words.begin(), words.end() - 1);
  EXPECT_THROW(decode_plan(cut), Error);
  std::vector<int64_t> longer = words;
  longer.push_back(0);
  EXPECT_THROW(decode_plan(longer), Error);
  std::vector<int64_t> bad_count = words;
  bad_count[2] = 1000;  // more requests than words
  EXPECT_THROW(decode_plan(bad_count), Error);
  std::vector<int64_t> bad_reason = words;
  bad_reason[bad_reason.size() - 2] = 17;  // the last finish's reason
  EXPECT_THROW(decode_plan(bad_reason), Error);
}

TEST_F(StepPlans, TwoEnginesApplyingTheSamePlansGenerateTheSameTokens) {
  model::GPTModel m(tiny_gpt(), DType::kF32, 4);
  EngineOptions o;
  o.max_sequences = 3;  // some requests wait in the queue
  o.prefill_chunk = 4;
  Engine leader(m, o), follower(m, o);
  std::vector<StepPlan> plans(6);
  plans[0].submits = {request(0, 12), request(1, 30), request(2, 7)};
  plans[0].submits[0].stop_tokens.clear();    // runs until it is ended
  plans[0].submits[1].prompt.push_back(999);  // outside the vocabulary: refused on both
  plans[1].submits = {request(3, 20), request(4, 6)};
  plans[3].finishes = {{1, FinishReason::kAbort}};  // gone mid-generation
  plans[4].submits = {request(5, 15)};
  std::vector<uint64_t> all_ids;
  for (int step = 0; step < 60; ++step) {
    const StepPlan plan = step < 6 ? plans[step] : StepPlan{};
    std::vector<std::string> le, fe;
    const std::vector<uint64_t> a = apply_plan(leader, plan, le);
    const std::vector<uint64_t> b = apply_plan(follower, decode_plan(encode_plan(plan)), fe);
    ASSERT_EQ(a, b);
    ASSERT_EQ(le, fe);
    all_ids.insert(all_ids.end(), a.begin(), a.end());
    EXPECT_EQ(leader.step(), follower.step());
    EXPECT_EQ(leader.cache().free_blocks(), follower.cache().free_blocks());
  }
  EXPECT_TRUE(leader.idle() && follower.idle());
  EXPECT_EQ(all_ids, (std::vector<uint64_t>{1, 0, 2, 3, 4, 5}));  // the refused one has no id
  for (const uint64_t id : {2, 3, 4, 5}) {
    const Generation& g = leader.generation(id);
    EXPECT_TRUE(g.finished());
    ASSERT_EQ(g.tokens.size(), follower.generation(id).tokens.size());
    for (size_t t = 0; t < g.tokens.size(); ++t)
      EXPECT_EQ(g.tokens[t].token, follower.generation(id).tokens[t].token);
  }
  EXPECT_EQ(leader.generation(1).finish, FinishReason::kAbort);
  EXPECT_LT(leader.generation(1).tokens.size(), 12u);  // ended before its max_tokens
  EXPECT_EQ(leader.cache().free_blocks(), leader.cache().num_blocks());
}

TEST_F(StepPlans, AClosedStreamFreesItsBlocksAndCountsAsAborted) {
  // A long context, so the generation is still running when the stream closes (4000 tokens).
  model::ModelConfig c = tiny_gpt();
  c.seq_length = 4096;
  model::GPTModel m(c, DType::kF32, 5);
  EngineOptions o;
  o.max_sequences = 2;
  ServingLoop loop(m, o, 4, 600);
  GenerationRequest long_one = request(1, 4000);
  long_one.stop_tokens.clear();
  std::shared_ptr<Stream> s = loop.submit(long_one);
  ASSERT_TRUE(s);
  FinishReason finish;
  std::string error;
  EXPECT_FALSE(s->wait(0, finish, error).empty());  // it is generating
  s->close(FinishReason::kAbort);
  std::vector<GeneratedToken> tokens;
  do {
    tokens = s->wait(tokens.size(), finish, error);
  } while (finish == FinishReason::kNone && error.empty());
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(finish, FinishReason::kAbort);
  EXPECT_LT(static_cast<int64_t>(tokens.size()), 4000);  // ended early, not at max_tokens
  // The loop's snapshot is taken just after the step that ended it.
  ServingStats st = loop.stats();
  for (int ms = 0; ms < 5000 && st.finished[static_cast<int>(FinishReason::kAbort)] == 0; ++ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = loop.stats();
  }
  EXPECT_EQ(st.finished[static_cast<int>(FinishReason::kAbort)], 1);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.free_cache_blocks, st.cache_blocks);
  EXPECT_EQ(st.generation_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(st.prompt_tokens, 4);

  const std::string text =
      prometheus_metrics(st, MemoryAccountant::instance().snapshot(), 12345, "tiny \"m\"");
  EXPECT_NE(text.find("# TYPE tessera:request_aborted_total counter\n"
                      "tessera:request_aborted_total{model_name=\"tiny \\\"m\\\"\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera:num_requests_running{model_name=\"tiny \\\"m\\\"\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("tessera:kv_cache_usage_perc{model_name=\"tiny \\\"m\\\"\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("process_resident_memory_bytes{model_name=\"tiny \\\"m\\\"\"} 12345\n"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::inference
