#include "tessera/inference/jinja/expression_parser.h"

#include "tessera/inference/jinja/builtins.h"

namespace tessera::inference::jinja {

ExprPtr ExpressionParser::parse_tuple(bool with_condition) {
  const Token& at = cur();
  ExprPtr first = parse_expression(with_condition);
  if (!is_op(",")) return first;
  auto tuple = node<Expr>(Expr::Kind::kTuple, at);
  tuple->args.push_back(std::move(first));
  while (skip_op(",")) {
    if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVarEnd || is_op(")") ||
        is_name("in") || is_op("="))
      break;
    tuple->args.push_back(parse_expression(with_condition));
  }
  return tuple;
}

ExprPtr ExpressionParser::parse_expression(bool with_condition) {
  const Token& at = cur();
  ExprPtr e = parse_or();
  if (!with_condition) return e;
  while (is_name("if")) {
    next();
    auto c = node<Expr>(Expr::Kind::kCondition, at);
    c->args.push_back(parse_or());
    c->args.push_back(std::move(e));
    if (is_name("else")) {
      next();
      c->args.push_back(parse_expression());
    } else {
      c->args.push_back(nullptr);
    }
    e = std::move(c);
  }
  return e;
}

ExprPtr ExpressionParser::binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b) {
  auto e = node<Expr>(Expr::Kind::kBinary, at);
  e->name = op;
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

ExprPtr ExpressionParser::parse_or() {
  const Token& at = cur();
  ExprPtr e = parse_and();
  while (is_name("or")) {
    next();
    e = binary(at, "or", std::move(e), parse_and());
  }
  return e;
}

ExprPtr ExpressionParser::parse_and() {
  const Token& at = cur();
  ExprPtr e = parse_not();
  while (is_name("and")) {
    next();
    e = binary(at, "and", std::move(e), parse_not());
  }
  return e;
}

ExprPtr ExpressionParser::parse_not() {
  if (!is_name("not")) return parse_compare();
  const Token& at = cur();
  next();
  auto e = node<Expr>(Expr::Kind::kUnary, at);
  e->name = "not";
  e->args.push_back(parse_not());
  return e;
}

ExprPtr ExpressionParser::parse_compare() {
  const Token& at = cur();
  ExprPtr first = parse_math1();
  std::unique_ptr<Expr> cmp;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
         cur().value == ">" || cur().value == ">=")) {
      op = cur().value;
      next();
    } else if (is_name("in")) {
      op = "in";
      next();
    } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
      op = "notin";
      next();
      next();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node<Expr>(Expr::Kind::kCompare, at);
      cmp->args.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->args.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr ExpressionParser::parse_math1() {
  const Token& at = cur();
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    const std::string op = cur().value;
    next();
    e = binary(at, op, std::move(e), parse_concat());
  }
  return e;
}

ExprPtr ExpressionParser::parse_concat() {
  const Token& at = cur();
  ExprPtr e = parse_math2();
  while (skip_op("~")) e = binary(at, "~", std::move(e), parse_math2());
  return e;
}

ExprPtr ExpressionParser::parse_math2() {
  const Token& at = cur();
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = cur().value;
    next();
    e = binary(at, op, std::move(e), parse_pow());
  }
  return e;
}

ExprPtr ExpressionParser::parse_pow() {
  const Token& at = cur();
  ExprPtr e = parse_unary(true);
  while (skip_op("**")) e = binary(at, "**", std::move(e), parse_unary(true));
  return e;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  const Token& at = cur();
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const std::string op = cur().value;
    next();
    e = node<Expr>(Expr::Kind::kUnary, at);
    e->name = op;
    e->args.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = cur();
  switch (t.type) {
    case TokenType::kName: {
      auto e = node<Expr>(Expr::Kind::kLiteral, t);
      if (t.value == "true" || t.value == "True") {
        e->literal = Value::boolean(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = Value::boolean(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.value;
      }
      next();
      return e;
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) {  // 'a' 'b' is 'ab', as in Python
        s += cur().value;
        next();
      }
      auto e = node<Expr>(Expr::Kind::kLiteral, t);
      e->literal = Value::string(std::move(s));
      return e;
    }
    case TokenType::kInteger:
    case TokenType::kFloat: {
      auto e = node<Expr>(Expr::Kind::kLiteral, t);
      e->literal = t.type == TokenType::kInteger ? Value::integer(t.integer) : Value::real(t.real);
      next();
      return e;
    }
    case TokenType::kOperator:
      if (t.value == "(") {
        next();
        if (skip_op(")")) return node<Expr>(Expr::Kind::kTuple, t);
        ExprPtr e = parse_expression();
        if (is_op(",")) {
          auto tuple = node<Expr>(Expr::Kind::kTuple, t);
          tuple->args.push_back(std::move(e));
          while (skip_op(",") && !is_op(")")) tuple->args.push_back(parse_expression());
          e = std::move(tuple);
        }
        expect_op(")");
        return e;
      }
      if (t.value == "[" || t.value == "{") {
        const bool dict = t.value == "{";
        next();
        auto e = node<Expr>(dict ? Expr::Kind::kDict : Expr::Kind::kList, t);
        const char* close = dict ? "}" : "]";
        while (!is_op(close)) {
          if (!e->args.empty()) expect_op(",");
          if (is_op(close)) break;  // a trailing comma
          e->args.push_back(parse_expression());
          if (dict) {
            expect_op(":");
            e->args.push_back(parse_expression());
          }
        }
        next();
        return e;
      }
      [[fallthrough]];
    default:
      error_at(t, "unexpected " + describe(t) + ", expected an expression");
  }
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr e) {
  while (true) {
    const Token& at = cur();
    if (is_op(".")) {
      next();
      if (cur().type == TokenType::kInteger) {  // foo.0 is foo[0] in Jinja
        auto g = node<Expr>(Expr::Kind::kGetItem, at);
        g->args.push_back(std::move(e));
        auto k = node<Expr>(Expr::Kind::kLiteral, cur());
        k->literal = Value::integer(cur().integer);
        g->args.push_back(std::move(k));
        next();
        e = std::move(g);
        continue;
      }
      auto g = node<Expr>(Expr::Kind::kGetAttr, at);
      g->name = expect_name("an attribute name after '.'");
      g->args.push_back(std::move(e));
      e = std::move(g);
    } else if (is_op("[")) {
      next();
      e = parse_subscript(std::move(e), at);
    } else if (is_op("(")) {
      e = parse_call(std::move(e), Expr::Kind::kCall, at);
    } else {
      return e;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr obj, const Token& at) {
  ExprPtr parts[3];
  bool slice = false;
  if (!is_op(":")) parts[0] = parse_expression();
  if (skip_op(":")) {
    slice = true;
    if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
    if (skip_op(":") && !is_op("]")) parts[2] = parse_expression();
  }
  expect_op("]");
  auto e = node<Expr>(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, at);
  e->args.push_back(std::move(obj));
  e->args.push_back(std::move(parts[0]));
  if (slice) {
    e->args.push_back(std::move(parts[1]));
    e->args.push_back(std::move(parts[2]));
  }
  return e;
}

// ( args, name=value ) after a callee, filter or test already in e->args[0].
ExprPtr ExpressionParser::parse_call(ExprPtr callee, Expr::Kind kind, const Token& at,
                                     std::string name) {
  auto e = node<Expr>(kind, at);
  e->name = std::move(name);
  e->args.push_back(std::move(callee));
  if (!skip_op("(")) return e;
  while (!is_op(")")) {
    if (e->args.size() > 1 || !e->kwargs.empty()) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*") || is_op("**"))
      error_at(cur(), "*args and **kwargs are not supported by the chat template interpreter");
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().value == "=") {
      std::string key = cur().value;
      next();
      next();
      e->kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!e->kwargs.empty()) error_at(cur(), "a positional argument after a keyword argument");
      e->args.push_back(parse_expression());
    }
  }
  next();
  return e;
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    const Token& at = cur();
    if (is_op("|")) {
      next();
      const Token& name_at = cur();
      std::string name = expect_name("a filter name after '|'");
      if (!has_filter(name))
        error_at(name_at,
                 "filter '" + name + "' is not supported by the chat template interpreter");
      e = parse_call(std::move(e), Expr::Kind::kFilter, at, name);
    } else if (is_name("is")) {
      next();
      const bool negated = is_name("not");
      if (negated) next();
      const Token& name_at = cur();
      std::string name = cur().type == TokenType::kName ? cur().value : "";
      if (name.empty()) error_at(cur(), "unexpected " + describe(cur()) + ", expected a test name");
      next();
      if (!has_test(name))
        error_at(name_at, "test '" + name + "' is not supported by the chat template interpreter");
      const bool bare_argument =
          (cur().type == TokenType::kName && cur().value != "else" && cur().value != "or" &&
           cur().value != "and" && cur().value != "if") ||
          cur().type == TokenType::kString || cur().type == TokenType::kInteger ||
          cur().type == TokenType::kFloat || is_op("[") || is_op("{");
      if (bare_argument) {  // `x is divisibleby 3`: one argument without parentheses
        auto t = node<Expr>(Expr::Kind::kTest, at);
        t->name = name;
        t->args.push_back(std::move(e));
        t->args.push_back(parse_postfix(parse_primary()));
        e = std::move(t);
      } else {
        e = parse_call(std::move(e), Expr::Kind::kTest, at, name);
      }
      e->negated = negated;
    } else if (is_op("(")) {
      e = parse_call(std::move(e), Expr::Kind::kCall, at);
    } else {
      return e;
    }
  }
}

}  // namespace tessera::inference::jinja
