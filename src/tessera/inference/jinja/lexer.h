// The tokens of a Jinja2 template, with whitespace control already applied to the text between
// tags the way Jinja's own lexer does it under Hugging Face's settings (trim_blocks and
// lstrip_blocks on, keep_trailing_newline off):
//  - "\r\n" and "\r" become "\n"; one newline at the very end of the template is dropped;
//  - {%- / {{- / {#- strip all whitespace before the tag, -%} / -}} / -#} all whitespace after;
//  - trim_blocks: the first newline after %} or #} is dropped (not after }}; +%} keeps it);
//  - lstrip_blocks: spaces and tabs from the start of a line up to {% or {# are dropped
//    (not before {{; {%+ keeps them).
// Comments produce no tokens. Each token carries the line and column (1-based, columns in
// characters) where it starts, for error messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::inference::jinja {

enum class TokenType {
  kText,        // literal output (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier (value)
  kString,      // string literal, escapes resolved (value)
  kInteger,     // (integer)
  kFloat,       // (real)
  kOperator,    // + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } (value)
  kEnd          // end of the template
};

struct Token {
  TokenType type;
  std::string value;
  int64_t integer = 0;
  double real = 0;
  int line = 1;
  int column = 1;
};

// Throws Error "chat template line L column C: ..." for an unclosed tag, comment or string, a
// character that cannot start a token, an integer beyond 64 bits or {% raw %} (not supported).
std::vector<Token> tokenize(std::string_view source);

// "chat template line L column C: " + message, the form every template error takes.
std::string located(int line, int column, const std::string& message);

// A token as Jinja's messages describe it: 'end of print statement', 'foo', ...
std::string describe(const Token& t);

}  // namespace tessera::inference::jinja
