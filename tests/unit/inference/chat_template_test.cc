// Chat templates against real Jinja2: tests/data/chat_templates/expected.json holds what
// Jinja2 (as transformers configures it) renders for a corpus of public chat templates on
// several conversations, and for templates exercising one feature each; it is written by
// chat_template_expected.py beside this file (run it to regenerate). Then the errors: syntax
// errors and unsupported constructs name line and column, raise_exception carries the
// template's message, and the tokenizer_config.json helpers.
#include "tessera/inference/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace tessera::inference {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const ordered_json& expected() {
  static const ordered_json data = [] {
    const std::string path = std::string(TESSERA_TEST_DATA_DIR) + "/chat_templates/expected.json";
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    return ordered_json::parse(in);
  }();
  return data;
}

// The config as tessera-serve would read it (nlohmann::json), from the ordered fixture.
json config_of(const std::string& name) {
  return json::parse(expected()["templates"][name].dump());
}

// Renders `f` and checks it against the fixture's "output" or "raised" (raise_exception's
// message).
template <typename F>
void check(const ordered_json& c, const std::string& what, F&& render) {
  if (c.contains("output")) {
    try {
      EXPECT_EQ(render(), c["output"].get<std::string>()) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": threw " << e.what();
    }
  } else if (c.contains("raised")) {
    try {
      const std::string out = render();
      ADD_FAILURE() << what << ": rendered '" << out << "', expected raise_exception";
    } catch (const TemplateRaised& e) {
      EXPECT_EQ(e.message, c["raised"].get<std::string>()) << what;
      EXPECT_EQ(std::string(e.what()), "chat template: " + e.message) << what;
    }
  } else {
    ADD_FAILURE() << what << ": the fixture has an unexpected Jinja2 error " << c.dump();
  }
}

TEST(ChatTemplate, CorpusMatchesJinja2) {
  int checked = 0;
  for (const ordered_json& c : expected()["cases"]) {
    const std::string name = c["template"].get<std::string>();
    const std::string conversation = c["conversation"].get<std::string>();
    const bool add_generation_prompt = c["add_generation_prompt"].get<bool>();
    const ChatTemplate chat = ChatTemplate::from_tokenizer_config(config_of(name));
    // ordered_json: a message's keys in the request's order, as transformers sees them.
    const ordered_json& messages = expected()["conversations"][conversation];
    check(c,
          name + " / " + conversation +
              (add_generation_prompt ? " / generation prompt" : " / no generation prompt"),
          [&] { return chat.apply(messages, add_generation_prompt); });
    ++checked;
  }
  EXPECT_GE(checked, 200);
}

TEST(ChatTemplate, FeaturesMatchJinja2) {
  int checked = 0;
  for (const ordered_json& f : expected()["features"]) {
    const std::string source = f["template"].get<std::string>();
    check(f, source, [&] { return ChatTemplate(source).render(f["variables"]); });
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

TEST(ChatTemplate, DefaultTemplateIsTheDocumentedFormat) {
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(json::object());
  EXPECT_TRUE(chat.is_default());
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi {{ x }}"}}};
  EXPECT_EQ(chat.apply(messages), "system: Be brief.\nuser: Hi {{ x }}\nassistant:");
  EXPECT_EQ(chat.apply(messages, false), "system: Be brief.\nuser: Hi {{ x }}\n");
  // The fixture's copy of the default is the same text, so Jinja2 renders it the same way.
  EXPECT_EQ(config_of("tessera-default")["chat_template"].get<std::string>(),
            std::string(kDefaultChatTemplate));
}

// The message of the Error `source` throws when parsed ("" if it parses).
std::string parse_error(const std::string& source) {
  try {
    ChatTemplate t(source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the Error rendering `source` with `variables` throws ("" if it renders).
std::string render_error(const std::string& source, const json& variables = json::object()) {
  try {
    ChatTemplate(source).render(variables);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("hello\n{% for x in [1] %}\n  {{ x + }}\n{% endfor %}"),
            "chat template line 3 column 10: unexpected end of print statement, expected an "
            "expression");
  EXPECT_EQ(parse_error("ab\n  {% if x %}{% for y in x %}{{ y }}{% endfor %}"),
            "chat template line 2 column 6: 'if' is never closed: expected 'elif' or 'else' or "
            "'endif' before the end of the template");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "chat template line 1 column 4: unclosed string literal");
  EXPECT_EQ(parse_error("x\n{{ 1 }"), "chat template line 2 column 6: unexpected '}'");
  EXPECT_EQ(parse_error("x\n{{ 1 "),
            "chat template line 2 column 1: unclosed tag: '{{' without '}}'");
  EXPECT_EQ(parse_error("{# open"),
            "chat template line 1 column 1: unclosed comment: '{#' without '#}'");
  EXPECT_EQ(parse_error("{{ a $ b }}"), "chat template line 1 column 6: unexpected character '$'");
  EXPECT_EQ(parse_error("{% endfor %}"),
            "chat template line 1 column 4: unknown or misplaced statement 'endfor'");
  EXPECT_EQ(parse_error("{{ 05 }}"),  // Jinja's integers have no leading zeros
            "chat template line 1 column 5: unexpected integer, expected end of print statement");
  EXPECT_EQ(parse_error("{% break %}"),
            "chat template line 1 column 4: 'break' outside a for loop");
  EXPECT_EQ(parse_error("{{ [1, 2 }}"),
            "chat template line 1 column 10: unexpected '}', expected ']'");
  EXPECT_EQ(parse_error("{{ f(1] }}"),
            "chat template line 1 column 7: unexpected ']', expected ')'");
}

TEST(ChatTemplate, UnsupportedConstructsAreErrorsNamingThem) {
  // Columns count characters: "é" is one.
  EXPECT_EQ(parse_error("é {{ messages | wordcount }}"),
            "chat template line 1 column 17: filter 'wordcount' is not supported by the chat "
            "template interpreter");
  EXPECT_EQ(parse_error("{% if x is escaped %}{% endif %}"),
            "chat template line 1 column 12: test 'escaped' is not supported by the chat template "
            "interpreter");
  EXPECT_EQ(parse_error("{% call f() %}x{% endcall %}"),
            "chat template line 1 column 4: the 'call' statement is not supported by the chat "
            "template interpreter");
  EXPECT_EQ(parse_error("{% raw %}{{ x }}{% endraw %}"),
            "chat template line 1 column 3: {% raw %} is not supported by the chat template "
            "interpreter");
  EXPECT_EQ(parse_error("{{ f(*args) }}"),
            "chat template line 1 column 6: *args and **kwargs are not supported by the chat "
            "template interpreter");
  // Known to Python, not to the interpreter: an error when called, at the call.
  EXPECT_EQ(render_error("\n{{ 'x'.zfill(3) }}"),
            "chat template line 2 column 13: the str method 'zfill' is not supported by the chat "
            "template interpreter");
  EXPECT_EQ(render_error("{{ '%s' % 1 }}"),
            "chat template line 1 column 4: string formatting with '%' is not supported by the "
            "chat template interpreter");
  EXPECT_EQ(render_error("{{ 2 ** 64 }}"),
            "chat template line 1 column 4: integer overflow in '**' (the interpreter's integers "
            "are 64-bit)");
  EXPECT_EQ(render_error("{{ [1]|join(sep=',') }}"),
            "chat template line 1 column 7: join: unexpected keyword argument 'sep'");
}

TEST(ChatTemplate, RenderErrorsNameLineAndColumn) {
  EXPECT_EQ(render_error("{{ user.name }}"), "chat template line 1 column 8: 'user' is undefined");
  EXPECT_EQ(render_error("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}",
                         {{"messages", {{{"content", "x"}}}}}),
            "chat template line 2 column 4: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.y = 2 %}"),
            "chat template line 1 column 19: cannot assign attribute 'y' on 'x', which is not a "
            "namespace() (the sandbox allows no other)");
  EXPECT_EQ(render_error("{% for x in 5 %}{% endfor %}"),
            "chat template line 1 column 4: 'int' object is not iterable");
  EXPECT_EQ(render_error("{{ [2, 1]|sort(reverse=revers) }}"),
            "chat template line 1 column 10: sort: 'reverse': 'revers' is undefined");
  EXPECT_EQ(render_error("{{ range(200000) }}"),
            "chat template line 1 column 9: range: more than 100000 items (the sandbox's limit)");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  const ChatTemplate chat(
      "{% if messages[0]['role'] == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}ok");
  try {
    chat.apply(json::array({{{"role", "system"}, {"content", "x"}}}));
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {  // TemplateRaised is a tessera::Error
    EXPECT_EQ(std::string(e.what()), "chat template: System role not supported");
    ASSERT_NE(dynamic_cast<const TemplateRaised*>(&e), nullptr);
    EXPECT_EQ(dynamic_cast<const TemplateRaised&>(e).message, "System role not supported");
  }
  EXPECT_EQ(chat.apply(json::array({{{"role", "user"}, {"content", "x"}}})), "ok");
}

TEST(ChatTemplate, TemplateFromConfig) {
  EXPECT_EQ(chat_template_from_config(json::object()), "");
  EXPECT_EQ(chat_template_from_config({{"chat_template", nullptr}}), "");
  EXPECT_EQ(chat_template_from_config({{"chat_template", "{{ x }}"}}), "{{ x }}");
  const json named = {
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}};
  EXPECT_EQ(chat_template_from_config(named), "D");
  EXPECT_THROW(
      chat_template_from_config({{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}}}}),
      Error);
  EXPECT_THROW(chat_template_from_config({{"chat_template", 3}}), Error);
  EXPECT_THROW(chat_template_from_config({{"chat_template", {{{"name", "default"}}}}}), Error);
}

TEST(ChatTemplate, SpecialTokensFromConfig) {
  const json config = {{"bos_token", "<s>"},
                       {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
                       {"pad_token", nullptr},
                       {"unk_token", 5}};
  EXPECT_EQ(special_token_from_config(config, "bos_token"), "<s>");
  EXPECT_EQ(special_token_from_config(config, "eos_token"), "</s>");
  EXPECT_EQ(special_token_from_config(config, "pad_token"), "");
  EXPECT_EQ(special_token_from_config(config, "mask_token"), "");
  EXPECT_THROW(special_token_from_config(config, "unk_token"), Error);
  // Set tokens are variables; unset ones are undefined, as in transformers.
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(
      {{"chat_template", "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}"},
       {"bos_token", "<s>"},
       {"eos_token", {{"content", "</s>"}}}});
  EXPECT_EQ(chat.apply(json::array()), "<s>|</s>|False");
}

TEST(ChatTemplate, RendersOnManyThreadsAtOnce) {
  const ChatTemplate chat = ChatTemplate::from_tokenizer_config(config_of("deepseek-r1"));
  const ordered_json& messages = expected()["conversations"]["multi_turn"];
  const std::string want = chat.apply(messages);
  std::vector<std::thread> threads;
  std::vector<int> same(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) same[t] += chat.apply(messages) == want;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(same[t], 50);
}

}  // namespace
}  // namespace tessera::inference
