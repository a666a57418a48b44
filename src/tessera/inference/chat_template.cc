#include "tessera/inference/chat_template.h"

#include "tessera/inference/jinja/template.h"

namespace tessera::inference {

using nlohmann::json;

std::string chat_template_from_config(const json& config) {
  if (!config.is_object()) throw Error("tokenizer_config.json: expected a JSON object");
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") ||
          !t["name"].is_string() || !t["template"].is_string())
        throw Error(
            "tokenizer_config.json: chat_template: expected a list of {\"name\": string, "
            "\"template\": string}");
      if (t["name"] == "default") return t["template"].get<std::string>();
    }
    throw Error(
        "tokenizer_config.json: chat_template: a list of named templates without one named "
        "\"default\"");
  }
  throw Error(
      "tokenizer_config.json: chat_template: expected a string or a list of {\"name\", "
      "\"template\"}");
}

std::string special_token_from_config(const json& config, const std::string& key) {
  if (!config.is_object()) throw Error("tokenizer_config.json: expected a JSON object");
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error("tokenizer_config.json: " + key +
              ": expected a string or an object with a string \"content\"");
}

ChatTemplate::ChatTemplate(const std::string& source, json special_tokens)
    : source_(source),
      special_tokens_(std::move(special_tokens)),
      template_(std::make_shared<const jinja::Template>(source)) {
  if (!special_tokens_.is_object())
    throw Error("chat template: special tokens must be a JSON object");
}

json special_tokens_from_config(const json& config) {
  json tokens = json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                          "cls_token", "mask_token"}) {
    // Only the tokens the config sets become variables, as in transformers (an unset one is
    // undefined in the template, not "").
    const auto it = config.find(key);
    if (it != config.end() && !it->is_null()) tokens[key] = special_token_from_config(config, key);
  }
  return tokens;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const json& config) {
  const std::string source = chat_template_from_config(config);
  json tokens = special_tokens_from_config(config);
  return ChatTemplate(source.empty() ? std::string(kDefaultChatTemplate) : source,
                      std::move(tokens));
}

namespace {

template <typename Json>
jinja::Value apply_variables(const json& special_tokens, const Json& messages,
                             bool add_generation_prompt) {
  jinja::Dict vars;
  for (const auto& [k, v] : special_tokens.items()) vars.emplace_back(k, jinja::from_json(v));
  vars.emplace_back("messages", jinja::from_json(messages));
  vars.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.emplace_back("tools", jinja::Value::none());      // transformers passes tools=None and
  vars.emplace_back("documents", jinja::Value::none());  // documents=None
  return jinja::Value::make_dict(std::move(vars));
}

template <typename Json>
jinja::Value variables_of(const Json& variables) {
  if (!variables.is_object()) throw Error("chat template: variables must be a JSON object");
  return jinja::from_json(variables);
}

}  // namespace

std::string ChatTemplate::apply(const json& messages, bool add_generation_prompt) const {
  return template_->render(apply_variables(special_tokens_, messages, add_generation_prompt));
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                bool add_generation_prompt) const {
  return template_->render(apply_variables(special_tokens_, messages, add_generation_prompt));
}

std::string ChatTemplate::render(const json& variables) const {
  return template_->render(variables_of(variables));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return template_->render(variables_of(variables));
}

}  // namespace tessera::inference
