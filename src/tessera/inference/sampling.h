// Choosing the next token from a model's logits, each option with its conventional meaning (as
// Hugging Face Transformers' logits processors and vLLM define them), applied in this order:
//
//   repetition_penalty  every token already in the sequence (prompt or generated): a positive
//                       logit divided by the penalty, a negative one multiplied (CTRL, Keskar
//                       et al. 2019); 1 is off
//   temperature         logits / temperature; 0 is greedy: the largest logit (the lowest token
//                       id among equals), no draw
//   top_k               only the k largest logits (0: off)
//   top_p               only the smallest set of most likely tokens whose probability reaches
//                       top_p (nucleus sampling, Holtzman et al. 2020; 1: off)
//   min_p               only tokens whose probability is at least min_p times the largest
//                       (0: off)
//
// then one draw from the renormalised distribution: u in [0, 1) from Philox keyed by the
// request's seed and counted by the token's position, so a seeded request draws the same tokens
// whatever else is in the batch and in whatever order requests are served; the token is the
// first (in id order) at which the cumulative probability exceeds u.
//
// Log-probabilities are the model's: log-softmax of the raw logits (before penalty and
// temperature), in double precision.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera::inference {

struct SamplingParams {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0.0; }
  // "" when valid, else what is wrong, naming the field ("top_p: must be in (0, 1], got 1.5").
  std::string check() const;
};

// The next token from `logits` (the real vocabulary's, fp32), given the tokens of the sequence
// so far (`seen`, for the penalty) and the position the new token will take. `logits` is used
// as scratch.
int32_t sample_token(std::vector<float>& logits, const SamplingParams& params,
                     std::span<const int32_t> seen, int64_t position);

// log p(token) under softmax(logits), and with top_n > 0 the top_n most likely tokens with
// theirs (descending; equal values by token id).
struct TokenLogprob {
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_n = 0);

}  // namespace tessera::inference
