#include "tessera/inference/jinja/lexer.h"

#include <charconv>
#include <cmath>
#include <string>

#include "tessera/core/error.h"
#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

std::string located(int line, int column, const std::string& message) {
  return "chat template line " + std::to_string(line) + " column " + std::to_string(column) + ": " +
         message;
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText:
      return "template text";
    case TokenType::kVarBegin:
      return "'{{'";
    case TokenType::kVarEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kEnd:
      return "end of template";
    default:
      return "'" + t.value + "'";
  }
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // Jinja's: the text before the next tag starts a line
    while (pos_ < src_.size()) {
      const size_t start = next_tag(pos_);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      std::string text = src_.substr(pos_, start - pos_);
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+' && kind != '{') {
        const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((line_start > 0 || line_starting) &&
            text.find_first_not_of(" \t", line_start) == std::string::npos)
          text.erase(line_start);
      }
      emit_text(text);
      const size_t body = start + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      advance_to(start);
      if (kind == '#') {
        line_starting = comment(start, body);
      } else {
        line_starting = tag(kind, body);
      }
    }
    add(TokenType::kEnd, "", line_, column_);
    return std::move(tokens_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
    }
    return std::string::npos;
  }

  // Moves pos_ to `to`, counting lines and columns (columns in characters, not bytes).
  void advance_to(size_t to) {
    for (; pos_ < to; ++pos_) {
      const unsigned char c = src_[pos_];
      if (c == '\n') {
        ++line_;
        column_ = 1;
      } else if ((c & 0xc0) != 0x80) {
        ++column_;
      }
    }
  }

  [[noreturn]] void error(int line, int column, const std::string& message) const {
    throw Error(located(line, column, message));
  }

  void add(TokenType type, std::string value, int line, int column) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line;
    t.column = column;
    tokens_.push_back(std::move(t));
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) add(TokenType::kText, text, line_, column_);
  }

  // After an end tag: -X} eats all whitespace, +X} nothing, X} (trim_blocks: block and comment
  // ends only) one newline. Returns whether the next text starts a line.
  bool after_end(size_t end, char sign, bool trim) {
    size_t p = end;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trim && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    advance_to(p);
    return p > end && src_[p - 1] == '\n';
  }

  bool comment(size_t start, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) {
      advance_to(start);
      error(line_, column_, "unclosed comment: '{#' without '#}'");
    }
    const char sign = close > body ? src_[close - 1] : '\0';
    advance_to(close + 2);
    return after_end(close + 2, sign, true);
  }

  // The tokens of {{ ... }} or {% ... %}; the end is only recognised outside brackets, as in
  // Jinja ({{ {'a': {'b': 1}} }} is a dict, not an early end).
  bool tag(char kind, size_t body) {
    const int line = line_, column = column_;
    const bool block = kind == '%';
    add(block ? TokenType::kBlockBegin : TokenType::kVarBegin, block ? "{%" : "{{", line, column);
    advance_to(body);
    if (block) reject_raw();
    std::string open;  // brackets not yet closed
    const char end0 = block ? '%' : '}';
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        error(line, column,
              std::string("unclosed tag: '") + (block ? "{%" : "{{") + "' without '" +
                  (block ? "%}" : "}}") + "'");
      char sign = '\0';
      size_t end = pos_;
      if ((src_[pos_] == '-' || src_[pos_] == '+') && pos_ + 1 < src_.size()) {
        sign = src_[pos_];
        ++end;
      }
      if (open.empty() && end + 1 < src_.size() && src_[end] == end0 && src_[end + 1] == '}' &&
          (sign != '+' || block)) {
        add(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", line_, column_);
        advance_to(end + 2);
        return after_end(end + 2, sign, block);
      }
      token(open);
    }
  }

  void reject_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") == 0 && (p + 3 >= src_.size() || !is_name_char(src_[p + 3])))
      error(line_, column_, "{% raw %} is not supported by the chat template interpreter");
  }

  void token(std::string& open) {
    const int line = line_, column = column_;
    const char c = src_[pos_];
    if (is_name_start(c)) {
      size_t p = pos_;
      while (p < src_.size() && is_name_char(src_[p])) ++p;
      add(TokenType::kName, src_.substr(pos_, p - pos_), line, column);
      advance_to(p);
    } else if (is_digit(c)) {
      number(line, column);
    } else if (c == '\'' || c == '"') {
      string_literal(line, column);
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      for (const char* op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          add(TokenType::kOperator, op, line, column);
          advance_to(pos_ + 2);
          return;
        }
      }
      if (std::string_view("+-*/%~=.:|,()[]{}<>").find(c) == std::string_view::npos)
        error(line, column, std::string("unexpected character '") + c + "'");
      if (c == '(' || c == '[' || c == '{') open += c;
      if (c == ')' || c == ']' || c == '}') {
        const char want = open.empty()         ? '\0'
                          : open.back() == '(' ? ')'
                          : open.back() == '[' ? ']'
                                               : '}';
        if (c != want)
          error(line, column,
                std::string("unexpected '") + c + "'" +
                    (want ? std::string(", expected '") + want + "'" : ""));
        open.pop_back();
      }
      add(TokenType::kOperator, std::string(1, c), line, column);
      advance_to(pos_ + 1);
    }
  }

  // Jinja's integer and float literals: digits with '_' separators, a fraction and/or exponent.
  void number(int line, int column) {
    size_t p = pos_;
    const auto digits = [&] {
      while (p < src_.size() && (is_digit(src_[p]) ||
                                 (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1]))))
        ++p;
    };
    digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      ++p;
      digits();
      is_float = true;
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        p = q;
        digits();
        is_float = true;
      }
    }
    if (!is_float && src_[pos_] == '0') {
      // Jinja's integers have no leading zeros: "05" is the integer 0, then 5 (a syntax error
      // in the parser), never 5. (0x1f, 0o17, 0b1 are not read either: an error, not a guess.)
      p = pos_ + 1;
      while (p + 1 < src_.size() && (src_[p] == '0' || src_[p] == '_') && src_[p + 1] == '0') ++p;
      if (p < src_.size() && src_[p] == '0') ++p;
    }
    std::string text;
    for (size_t k = pos_; k < p; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t;
    t.line = line;
    t.column = column;
    t.value = text;
    if (is_float) {
      t.type = TokenType::kFloat;
      t.real = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = TokenType::kInteger;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), t.integer);
      if (r.ec != std::errc())
        error(line, column, "integer literal " + text + " is beyond 64 bits");
    }
    tokens_.push_back(std::move(t));
    advance_to(p);
  }

  // Python's escapes, as Jinja resolves them ("unicode-escape"); an unknown escape keeps its
  // backslash.
  void string_literal(int line, int column) {
    const char quote = src_[pos_];
    std::string out;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) error(line, column, "unclosed string literal");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\' || p + 1 >= src_.size()) {
        out += c;
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      const auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k, ++p) {
          if (p >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[p])))
            error(line, column, std::string("bad \\") + e + " escape in string literal");
          v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, src_[p]), nullptr, 16));
        }
        return v;
      };
      switch (e) {
        case '\n':
          break;  // a backslash-newline continues the line
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          append_utf8(out, hex(2));
          break;
        case 'u':
          append_utf8(out, hex(4));
          break;
        case 'U':
          append_utf8(out, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = e - '0';
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k)
              v = v * 8 + (src_[p++] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    add(TokenType::kString, out, line, column);
    advance_to(p + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1, column_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
  return Lexer(std::move(src)).run();
}

}  // namespace tessera::inference::jinja
