#include "tessera/inference/api_requests.h"

#include <cmath>

namespace tessera::inference {
namespace {

using nlohmann::json;

// Field `name` of `body` as a number in [lo, hi] (absent or null: `fallback`).
double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number())
    throw RequestError(name, std::string(name) + ": expected a number, got " + it->type_name());
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi) || !std::isfinite(v))
    throw RequestError(name, std::string(name) + ": must be in [" + json(lo).dump() + ", " +
                                 json(hi).dump() + "], got " + it->dump());
  return v;
}

int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    throw RequestError(name, std::string(name) + ": expected an integer, got " + it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    throw RequestError(name, std::string(name) + ": must be in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "], got " + std::to_string(v));
  return v;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw RequestError(name, std::string(name) + ": expected true or false, got " + it->dump());
  return it->get<bool>();
}

void require_object(const json& body) {
  if (!body.is_object()) throw RequestError("", "the request body must be a JSON object");
}

std::vector<int32_t> encode(const std::string& text, const data::Tokenizer* tokenizer,
                            const char* field) {
  if (tokenizer == nullptr)
    throw RequestError(
        field, std::string(field) + ": this server has no tokenizer; give the prompt as token ids");
  return tokenizer->encode(text);
}

// The sampling fields every API shares (OpenAI's names, vLLM's additions).
SamplingParams sampling(const json& body, uint64_t seed) {
  SamplingParams p;
  p.temperature = number(body, "temperature", 1.0, 0.0, 100.0);
  p.top_p = number(body, "top_p", 1.0, 1e-9, 1.0);
  p.top_k = static_cast<int>(integer(body, "top_k", 0, -1, 1 << 30));
  if (p.top_k < 0) p.top_k = 0;  // vLLM's -1: off
  p.min_p = number(body, "min_p", 0.0, 0.0, 1.0);
  p.repetition_penalty = number(body, "repetition_penalty", 1.0, 1e-3, 100.0);
  p.seed = static_cast<uint64_t>(integer(body, "seed", static_cast<int64_t>(seed >> 1), 0,
                                         std::numeric_limits<int64_t>::max()));
  return p;
}

std::vector<std::string> stop_strings(const json& body) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array() && it->size() <= 4) {
    for (const json& s : *it) {
      if (!s.is_string()) throw RequestError("stop", "stop: expected strings, got " + s.dump());
      out.push_back(s.get<std::string>());
    }
  } else {
    throw RequestError("stop", "stop: expected a string or a list of at most 4 strings");
  }
  for (const std::string& s : out)
    if (s.empty()) throw RequestError("stop", "stop: a stop string must not be empty");
  return out;
}

// The OpenAI fields both endpoints share, for one prompt of `prompt` tokens.
ApiRequest openai(const json& body, std::vector<int32_t> prompt, int32_t eod, uint64_t seed,
                  int64_t max_tokens) {
  if (integer(body, "n", 1, 1, 1) != 1) throw RequestError("n", "n: only 1 is supported");
  if (boolean(body, "echo", false)) throw RequestError("echo", "echo: only false is supported");
  ApiRequest r;
  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling = sampling(body, seed);
  // vLLM's ignore_eos: generate max_tokens whatever the model says (benchmarks need fixed lengths).
  if (eod >= 0 && !boolean(body, "ignore_eos", false)) g.stop_tokens.push_back(eod);
  r.stops = stop_strings(body);
  r.stream = boolean(body, "stream", false);
  r.generations.push_back(std::move(g));
  return r;
}

}  // namespace

ApiRequest parse_completion(const json& body, const data::Tokenizer* tokenizer, int32_t eod,
                            uint64_t seed) {
  require_object(body);
  const auto it = body.find("prompt");
  if (it == body.end()) throw RequestError("prompt", "prompt: required");
  std::vector<int32_t> prompt;
  if (it->is_string()) {
    prompt = encode(it->get<std::string>(), tokenizer, "prompt");
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        throw RequestError("prompt", "prompt: token ids must be non-negative integers");
      prompt.push_back(t.get<int32_t>());
    }
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    prompt = encode((*it)[0].get<std::string>(), tokenizer, "prompt");
  } else {
    throw RequestError("prompt", "prompt: expected a string or a list of token ids");
  }
  ApiRequest r = openai(body, std::move(prompt), eod, seed,
                        integer(body, "max_tokens", 16, 1, int64_t{1} << 30));
  r.logprobs = static_cast<int>(integer(body, "logprobs", -1, 0, 20));
  r.want_logprobs = r.logprobs >= 0;
  r.logprobs = std::max(r.logprobs, 0);
  r.generations[0].top_logprobs = r.logprobs;
  return r;
}

std::string chat_prompt(const json& messages, const ChatTemplate& chat,
                        bool add_generation_prompt) {
  if (!messages.is_array() || messages.empty())
    throw RequestError("messages", "messages: expected a non-empty list of {role, content}");
  // Each message as the template sees it: role and content strings (a content given as OpenAI's
  // list of text parts joined), the message's other fields kept (tool calls, names).
  json normalized = json::array();
  for (const json& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
      throw RequestError("messages",
                         "messages: each must be {\"role\": string, \"content\": string}");
    json message = m;
    const json& content = m["content"];
    if (content.is_array()) {
      std::string text;
      for (const json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          throw RequestError("messages",
                             "messages: a content part must be {\"type\": \"text\", \"text\": "
                             "string} (this server reads text only)");
        text += part["text"].get<std::string>();
      }
      message["content"] = text;
    } else if (!content.is_string()) {
      throw RequestError("messages",
                         "messages: each must be {\"role\": string, \"content\": string}");
    }
    normalized.push_back(std::move(message));
  }
  try {
    return chat.apply(normalized, add_generation_prompt);
  } catch (const Error& e) {  // raise_exception, or the template failing on these messages
    throw RequestError("messages", std::string("messages: ") + e.what());
  }
}

ApiRequest parse_chat(const json& body, const data::Tokenizer* tokenizer, int32_t eod,
                      uint64_t seed, const ChatTemplate& chat) {
  require_object(body);
  const auto it = body.find("messages");
  if (it == body.end()) throw RequestError("messages", "messages: required");
  const int64_t max_tokens =
      integer(body, "max_completion_tokens", integer(body, "max_tokens", 16, 1, int64_t{1} << 30),
              1, int64_t{1} << 30);
  ApiRequest r = openai(body,
                        encode(chat_prompt(*it, chat, boolean(body, "add_generation_prompt", true)),
                               tokenizer, "messages"),
                        eod, seed, max_tokens);
  r.want_logprobs = boolean(body, "logprobs", false);
  r.logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
  r.generations[0].top_logprobs = r.logprobs;
  return r;
}

ApiRequest parse_megatron(const json& body, const data::Tokenizer* tokenizer, int32_t eod,
                          uint64_t seed) {
  require_object(body);
  const auto it = body.find("prompts");
  if (it == body.end() || !it->is_array() || it->empty())
    throw RequestError("prompts", "prompts: expected a non-empty list of strings");
  const int64_t tokens = integer(body, "tokens_to_generate", 64, 1, int64_t{1} << 30);
  SamplingParams p;
  p.temperature = number(body, "temperature", 1.0, 0.0, 100.0);
  p.top_k = static_cast<int>(integer(body, "top_k", 0, 0, 1 << 30));
  const double top_p = number(body, "top_p", 0.0, 0.0, 1.0);
  if (p.top_k > 0 && top_p > 0)
    throw RequestError("top_p", "top_k and top_p: only one of them may be set (Megatron's rule)");
  p.top_p = top_p > 0 ? top_p : 1.0;
  if (p.top_k == 1) p.temperature = 0;  // Megatron: top_k 1 is greedy
  p.seed = static_cast<uint64_t>(integer(body, "random_seed", static_cast<int64_t>(seed >> 1), 0,
                                         std::numeric_limits<int64_t>::max()));
  const int64_t stop = integer(body, "stop_token", eod, -1, INT32_MAX);
  ApiRequest r;
  r.want_logprobs = boolean(body, "logprobs", false);
  for (const json& prompt : *it) {
    if (!prompt.is_string()) throw RequestError("prompts", "prompts: expected strings");
    GenerationRequest g;
    g.prompt = encode(prompt.get<std::string>(), tokenizer, "prompts");
    g.max_tokens = tokens;
    g.sampling = p;
    if (stop >= 0) g.stop_tokens.push_back(static_cast<int32_t>(stop));
    r.generations.push_back(std::move(g));
  }
  return r;
}

}  // namespace tessera::inference
