// Chat templates: the text a chat model expects for a list of messages, from the Jinja2
// template in a model directory's tokenizer_config.json (Hugging Face's "chat_template"),
// rendered as transformers' apply_chat_template renders it, or a documented default.
//
// How tessera-serve uses it — parse once at load, render per request:
//
//   #include "tessera/inference/chat_template.h"
//   // At load, once: the model directory's tokenizer_config.json parsed, or json::object()
//   // when there is none (then the default below, the format chat_prompt() produces today).
//   const ChatTemplate chat = ChatTemplate::from_tokenizer_config(config);  // throws Error
//   // Per request, on any thread (apply is const): the body's "messages" — parsed as
//   // nlohmann::ordered_json to keep each message's key order as transformers sees it (a
//   // template that prints whole objects with tojson shows it); nlohmann::json works too.
//   const std::string prompt = chat.apply(messages, /*add_generation_prompt=*/true);
//   // throws TemplateRaised (an Error) when the template calls raise_exception (a role order
//   // or system message it refuses): a 400 with what() ("chat template: <its message>").
//   // throws Error for any other failure on this input: what() names the template's line and
//   // column ("chat template line 3 column 10: 'x' is undefined").
//
// The interpreter (inference/jinja/) is a subset of Jinja2; docs/inference.md lists what it
// supports. Anything outside the subset is an Error when the template is parsed (an unknown
// filter, test or statement) or rendered (an unsupported method) — never a silent mis-render.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/inference/jinja/value.h"

namespace tessera::inference {

namespace jinja {
class Template;
}

// raise_exception(message) in a template: what() is "chat template: " + message.
using TemplateRaised = jinja::TemplateRaised;

// The template used when the model directory gives none: each message as
// "<role>: <content>\n", then "assistant:" when a generation prompt is asked for (the model
// continues as the assistant).
inline constexpr const char* kDefaultChatTemplate =
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} of which
// the one named "default" is used (as transformers does). "" when the key is absent or null.
// Throws Error naming the key when it has another shape, or a list has no "default".
std::string chat_template_from_config(const nlohmann::json& tokenizer_config);

// A special token's text from tokenizer_config.json ("bos_token", "eos_token", ...): a string,
// or an AddedToken object {"content": ...}. "" when absent or null; Error for another shape.
std::string special_token_from_config(const nlohmann::json& tokenizer_config,
                                      const std::string& key);

// The special tokens a config sets (bos, eos, unk, pad, sep, cls, mask), as template variables:
// {"bos_token": "<s>", ...}; an unset one is left out (undefined in a template, as in
// transformers).
nlohmann::json special_tokens_from_config(const nlohmann::json& tokenizer_config);

// A parsed chat template. Immutable; copies share the parsed tree; apply() and render() are
// const and safe to call from many threads at once.
class ChatTemplate {
 public:
  // Parses `source`. `special_tokens` (a JSON object of strings such as {"bos_token": "<s>"})
  // become template variables in apply(). Throws Error "chat template line L column C: ..." for
  // a syntax error or a construct the interpreter does not support.
  explicit ChatTemplate(const std::string& source,
                        nlohmann::json special_tokens = nlohmann::json::object());

  // The config's template (kDefaultChatTemplate when it has none) with its special tokens
  // (bos, eos, unk, pad, sep, cls, mask: those the config sets).
  static ChatTemplate from_tokenizer_config(const nlohmann::json& tokenizer_config);

  // What transformers' apply_chat_template(messages, add_generation_prompt, tokenize=False)
  // returns: the template rendered with `messages`, `add_generation_prompt`, `tools` and
  // `documents` (None), the special tokens, and the functions raise_exception and strftime_now.
  // `messages` is used as given (validating roles and contents is the caller's job). With
  // nlohmann::ordered_json, objects keep the request's key order (transformers sees Python
  // dicts in that order: it shows where a template prints a whole object, e.g. with tojson);
  // nlohmann::json sorts keys.
  std::string apply(const nlohmann::json& messages, bool add_generation_prompt = true) const;
  std::string apply(const nlohmann::ordered_json& messages,
                    bool add_generation_prompt = true) const;

  // Renders with `variables` (a JSON object) as the only variables.
  std::string render(const nlohmann::json& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

  const std::string& source() const { return source_; }
  bool is_default() const { return source_ == kDefaultChatTemplate; }

 private:
  std::string source_;
  nlohmann::json special_tokens_;
  std::shared_ptr<const jinja::Template> template_;
};

}  // namespace tessera::inference
