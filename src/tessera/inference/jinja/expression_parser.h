// The expression half of the parser (parser.h lists the grammar), with the token helpers the
// statement half shares: Parser in parser.cc derives from it. Method names follow Jinja's
// parser.py, so its precedence is easy to check against. Errors are tessera::Error naming the
// line and column of the offending token.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/inference/jinja/ast.h"
#include "tessera/inference/jinja/lexer.h"

namespace tessera::inference::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(const std::vector<Token>& tokens) : t_(tokens) {}

  // a, b, c -> a tuple; one expression without a comma -> that expression. `with_condition`
  // reads `x if c else y`; off for a for loop's iterable, where `if` starts the filter.
  ExprPtr parse_tuple(bool with_condition);
  ExprPtr parse_expression(bool with_condition = true);

 protected:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(pos_ + n, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }

  [[noreturn]] void error_at(const Token& t, const std::string& message) const {
    throw Error(located(t.line, t.column, message));
  }

  bool is_op(const char* op) const {
    return cur().type == TokenType::kOperator && cur().value == op;
  }
  bool is_name(const char* name) const {
    return cur().type == TokenType::kName && cur().value == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error_at(cur(), "unexpected " + describe(cur()) + ", expected '" + op + "'");
  }
  std::string expect_name(const char* what) {
    if (cur().type != TokenType::kName)
      error_at(cur(), "unexpected " + describe(cur()) + ", expected " + what);
    std::string n = cur().value;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd)
      error_at(cur(), "unexpected " + describe(cur()) + ", expected end of statement block");
    next();
  }

  template <typename Node>
  std::unique_ptr<Node> node(typename Node::Kind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;

 private:
  ExprPtr binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj, const Token& at);
  ExprPtr parse_call(ExprPtr callee, Expr::Kind kind, const Token& at, std::string name = "");
  ExprPtr parse_filter_expr(ExprPtr e);
};

}  // namespace tessera::inference::jinja
