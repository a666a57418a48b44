#include "tessera/inference/jinja/parser.h"

#include <set>
#include <string>

#include "tessera/core/error.h"
#include "tessera/inference/jinja/expression_parser.h"

namespace tessera::inference::jinja {
namespace {

const std::set<std::string, std::less<>> kUnsupportedStatements = {
    "call", "filter", "include", "import",    "from",       "extends", "block",  "with",
    "do",   "raw",    "trans",   "pluralize", "autoescape", "endraw",  "endcall"};

class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  // Statements until a {% tag %} named in `ends` (left unconsumed after its name: *end says
  // which) or, with no ends, the end of the template.
  Body parse_body(const std::set<std::string>& ends, std::string* end,
                  const Token* opened = nullptr, const char* opened_name = nullptr) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEnd) {
        if (ends.empty()) return body;
        std::string wanted;
        for (const auto& e : ends) wanted += (wanted.empty() ? "'" : " or '") + e + "'";
        error_at(*opened, std::string("'") + opened_name + "' is never closed: expected " + wanted +
                              " before the end of the template");
      }
      if (t.type == TokenType::kText) {
        auto s = node<Stmt>(Stmt::Kind::kText, t);
        s->text = t.value;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVarBegin) {
        next();
        auto s = node<Stmt>(Stmt::Kind::kOutput, t);
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::kVarEnd)
          error_at(cur(), "unexpected " + describe(cur()) + ", expected end of print statement");
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& name = peek();
        if (name.type == TokenType::kName && ends.count(name.value)) {
          *end = name.value;
          next();
          next();
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        error_at(t, "unexpected " + describe(t));
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& t = cur();
    if (t.type != TokenType::kName) error_at(t, "expected a statement name after '{%'");
    const std::string& name = t.value;
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error_at(t, "'" + name + "' outside a for loop");
      auto s = node<Stmt>(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, t);
      next();
      expect_block_end();
      return s;
    }
    if (name == "generation") {
      auto s = node<Stmt>(Stmt::Kind::kScope, t);
      next();
      expect_block_end();
      std::string end;
      s->body = parse_body({"endgeneration"}, &end, &t, "generation");
      expect_block_end();
      return s;
    }
    if (name == "macro") return parse_macro();
    if (kUnsupportedStatements.count(name))
      error_at(t, "the '" + name + "' statement is not supported by the chat template interpreter");
    error_at(t, "unknown or misplaced statement '" + name + "'");
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (!paren && !names.empty() && !(cur().type == TokenType::kName)) break;
      names.push_back(expect_name("a variable name"));
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for() {
    const Token& at = cur();
    next();
    auto s = node<Stmt>(Stmt::Kind::kFor, at);
    s->targets = parse_targets();
    if (!is_name("in")) error_at(cur(), "unexpected " + describe(cur()) + ", expected 'in'");
    next();
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      next();
      s->filter = parse_expression(true);
    }
    if (is_name("recursive"))
      error_at(cur(), "recursive for loops are not supported by the chat template interpreter");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"endfor", "else"}, &end, &at, "for");
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end, &at, "for");
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_if() {
    const Token& at = cur();
    next();
    auto s = node<Stmt>(Stmt::Kind::kIf, at);
    ExprPtr cond = parse_tuple(true);
    while (true) {
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end, &at, "if");
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "endif") break;
      if (end == "else") {
        expect_block_end();
        s->branches.emplace_back(nullptr, parse_body({"endif"}, &end, &at, "if"));
        break;
      }
      cond = parse_tuple(true);
    }
    expect_block_end();
    return s;
  }

  // macro name(a, b=default) %} body {% endmacro: calling it renders the body with the
  // arguments bound (*varargs, **kwargs and caller() are not supported).
  std::unique_ptr<Stmt> parse_macro() {
    const Token& at = cur();
    next();
    auto s = node<Stmt>(Stmt::Kind::kMacro, at);
    s->targets.push_back(expect_name("a macro name"));
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**"))
        error_at(cur(), "*args and **kwargs are not supported by the chat template interpreter");
      std::string param = expect_name("a parameter name");
      ExprPtr dflt;
      if (skip_op("=")) dflt = parse_expression();
      s->params.emplace_back(std::move(param), std::move(dflt));
    }
    next();
    expect_block_end();
    const int loops = loop_depth_;  // a macro's body is not inside the loops around it
    loop_depth_ = 0;
    std::string end;
    s->body = parse_body({"endmacro"}, &end, &at, "macro");
    loop_depth_ = loops;
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> parse_set() {
    const Token& at = cur();
    next();
    auto s = node<Stmt>(Stmt::Kind::kSet, at);
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == ".") {
      s->targets.push_back(cur().value);
      next();
      next();
      s->attribute = expect_name("an attribute name");
    } else {
      s->targets = parse_targets();
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (s->targets.size() != 1 || !s->attribute.empty())
      error_at(cur(), "unexpected " + describe(cur()) + ", expected '='");
    if (is_op("|"))
      error_at(cur(),
               "filters on {% set %} blocks are not supported by the chat template "
               "interpreter");
    expect_block_end();
    s->kind = Stmt::Kind::kSetBlock;
    std::string end;
    s->body = parse_body({"endset"}, &end, &at, "set");
    expect_block_end();
    return s;
  }

  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tessera::inference::jinja
