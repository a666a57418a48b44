#include "tessera/inference/jinja/parser.h"

#include <set>
#include <string>

#include "tessera/core/error.h"
#include "tessera/inference/jinja/builtins.h"

namespace tessera::inference::jinja {
namespace {

const std::set<std::string, std::less<>> kUnsupportedStatements = {
    "macro", "call", "filter", "include",   "import",     "from",   "extends",  "block",  "with",
    "do",    "raw",  "trans",  "pluralize", "autoescape", "endraw", "endmacro", "endcall"};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
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

  // Expressions. Names follow Jinja's parser.py, so its precedence is easy to check.

  // a, b, c -> a tuple; one expression without a comma -> that expression.
  ExprPtr parse_tuple(bool with_condition) {
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

  ExprPtr parse_expression(bool with_condition = true) {
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

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = node<Expr>(Expr::Kind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    const Token& at = cur();
    ExprPtr e = parse_and();
    while (is_name("or")) {
      next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    const Token& at = cur();
    ExprPtr e = parse_not();
    while (is_name("and")) {
      next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (!is_name("not")) return parse_compare();
    const Token& at = cur();
    next();
    auto e = node<Expr>(Expr::Kind::kUnary, at);
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
           cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
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

  ExprPtr parse_math1() {
    const Token& at = cur();
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().value;
      next();
      e = binary(at, op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    const Token& at = cur();
    ExprPtr e = parse_math2();
    while (skip_op("~")) e = binary(at, "~", std::move(e), parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    const Token& at = cur();
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      next();
      e = binary(at, op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    const Token& at = cur();
    ExprPtr e = parse_unary(true);
    while (skip_op("**")) e = binary(at, "**", std::move(e), parse_unary(true));
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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
        e->literal =
            t.type == TokenType::kInteger ? Value::integer(t.integer) : Value::real(t.real);
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

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
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
  ExprPtr parse_call(ExprPtr callee, Expr::Kind kind, const Token& at, std::string name = "") {
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

  ExprPtr parse_filter_expr(ExprPtr e) {
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
        if (name.empty())
          error_at(cur(), "unexpected " + describe(cur()) + ", expected a test name");
        next();
        if (!has_test(name))
          error_at(name_at,
                   "test '" + name + "' is not supported by the chat template interpreter");
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

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tessera::inference::jinja
