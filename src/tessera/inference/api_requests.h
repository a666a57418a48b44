// The requests tessera-serve accepts, read from their JSON bodies into GenerationRequests, with
// the field named in every refusal (the server answers 400 with it):
//
//   POST /v1/completions       OpenAI's: prompt (a string, or one list of token ids),
//                              max_tokens (16), temperature (1), top_p (1), seed, stop (a string
//                              or a list of up to 4), stream, logprobs (0-20: alternatives per
//                              token), n (1 only), echo (false only); Tessera's additions as vLLM
//                              names them: top_k, min_p, repetition_penalty, ignore_eos
//                              (the end-of-document token does not end the generation)
//   POST /v1/chat/completions  messages [{role, content}] (content a string or a list of
//                              {"type": "text", "text"} parts, joined) through the model's
//                              chat template (chat_template.h), the same sampling fields,
//                              max_tokens or max_completion_tokens, vLLM's
//                              add_generation_prompt (true)
//   PUT /api                   Megatron's text generation server: prompts (a list of strings),
//                              tokens_to_generate (64), temperature (1), top_k (0), top_p (0:
//                              off; top_k and top_p together are refused, as Megatron does),
//                              logprobs (bool), random_seed, stop_token (an id)
//
// A template's refusal (raise_exception: a role order it does not take) or failure on the
// messages is a RequestError naming "messages".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/inference/chat_template.h"
#include "tessera/inference/engine.h"

namespace tessera::inference {

// A refused request: `param` names the field ("" for the body as a whole).
struct RequestError : Error {
  RequestError(const std::string& param, const std::string& message)
      : Error(message), param(param) {}
  std::string param;
};

struct ApiRequest {
  std::vector<GenerationRequest> generations;  // one per prompt (several only on /api)
  std::vector<std::string> stops;
  bool stream = false;
  int logprobs = 0;  // alternatives per token (completions); /api: 1 when logprobs is true
  bool want_logprobs = false;
};

// `tokenizer` may be nullptr (then prompts must be token ids). `eod` (< 0: none) is added to
// every request's stop tokens. `seed` is used when the request gives none.
ApiRequest parse_completion(const nlohmann::json& body, const data::Tokenizer* tokenizer,
                            int32_t eod, uint64_t seed);
ApiRequest parse_chat(const nlohmann::json& body, const data::Tokenizer* tokenizer, int32_t eod,
                      uint64_t seed, const ChatTemplate& chat);
ApiRequest parse_megatron(const nlohmann::json& body, const data::Tokenizer* tokenizer, int32_t eod,
                          uint64_t seed);

// The chat template's text for `messages` (RequestError naming "messages" when malformed or
// refused by the template).
std::string chat_prompt(const nlohmann::json& messages, const ChatTemplate& chat,
                        bool add_generation_prompt = true);

}  // namespace tessera::inference
