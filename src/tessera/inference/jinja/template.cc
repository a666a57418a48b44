#include "tessera/inference/jinja/template.h"

#include <unordered_map>

#include "tessera/inference/jinja/builtins.h"
#include "tessera/inference/jinja/lexer.h"
#include "tessera/inference/jinja/operators.h"
#include "tessera/inference/jinja/parser.h"

namespace tessera::inference::jinja {
namespace {

using K = Value::Kind;

// Nesting beyond this many loops or macro calls (a macro may call itself) is refused rather
// than risking the stack.
constexpr int kMaxLoopDepth = 100;
constexpr int kMaxCallDepth = 100;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Value& context) {
    frames_.emplace_back();
    if (context.kind != K::kDict) throw Error("chat template context: expected a dict");
    for (const auto& [k, v] : *context.dict) frames_.back()[k] = v;
  }

  std::string run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  using Frame = std::unordered_map<std::string, Value>;

  // A failure from below gets the line and column of the innermost node that saw it.
  template <typename Node, typename F>
  auto located_at(const Node& n, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const RenderError& e) {
      if (e.located) throw;
      throw RenderError(located(n.line, n.column, e.what()), true);
    }
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      const auto it = f->find(name);
      if (it != f->end()) return it->second;
    }
    return global(name);
  }

  Flow exec(const Body& body) {
    for (const auto& s : body) {
      const Flow f = located_at(*s, [&] { return exec(*s); });
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out_ += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        out_ += to_str(eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (!cond || truthy(eval(*cond))) return exec(body);
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return exec_for(s);
      case Stmt::Kind::kSet: {
        const Value v = eval(*s.expr);
        if (!s.attribute.empty()) {
          const Value ns = lookup(s.targets[0]);
          if (ns.kind != K::kNamespace)
            fail("cannot assign attribute '" + s.attribute + "' on '" + s.targets[0] +
                 "', which is not a namespace() (the sandbox allows no other)");
          for (auto& kv : *ns.ns)
            if (kv.first == s.attribute) {
              kv.second = v;
              return Flow::kNormal;
            }
          ns.ns->emplace_back(s.attribute, v);
          return Flow::kNormal;
        }
        assign(s.targets, v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        exec(s.body);
        frames_.back()[s.targets[0]] = Value::string(std::move(out_));
        out_ = std::move(saved);
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return exec(s.body);
      case Stmt::Kind::kMacro: {
        // The scopes around the definition (a loop's variables), as they are now: Jinja's
        // macros are closures there. The template's top level is read when called.
        auto scopes =
            std::make_shared<const std::vector<Frame>>(frames_.begin() + 1, frames_.end());
        frames_.back()[s.targets[0]] = Value::function(
            s.targets[0],
            [this, &s, scopes](const CallArgs& a) { return call_macro(s, *scopes, a); });
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  // Binds one name, or unpacks a sequence into several (for a, b in ...; set a, b = ...).
  void assign(const std::vector<std::string>& targets, const Value& v) {
    Frame& frame = frames_.back();
    if (targets.size() == 1) {
      frame[targets[0]] = v;
      return;
    }
    const std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " +
           std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) frame[targets[k]] = items[k];
  }

  Flow exec_for(const Stmt& s) {
    if (++loop_depth_ > kMaxLoopDepth) fail("for loops nested too deeply");
    std::vector<Value> items = iterate(eval(*s.expr));
    if (s.filter) {  // {% for x in xs if cond %}: loop.* counts only the items kept
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        assign(s.targets, item);
        const bool keep = truthy(eval(*s.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      frames_.emplace_back();
      assign(s.targets, items[k]);
      frames_.back()["loop"] = loop_value(items, k);
      const Flow f = exec(s.body);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    if (n == 0 && !s.else_body.empty()) exec(s.else_body);
    --loop_depth_;
    return Flow::kNormal;
  }

  // A macro's body sees the template's top-level variables, the scopes it was defined in and
  // its arguments; not the scopes of its caller.
  Value call_macro(const Stmt& m, const std::vector<Frame>& scopes, const CallArgs& a) {
    const std::string& name = m.targets[0];
    if (++call_depth_ > kMaxCallDepth) fail("macro calls nested too deeply in '" + name + "'");
    if (a.positional.size() > m.params.size())
      fail("macro '" + name + "' takes not more than " + std::to_string(m.params.size()) +
           " argument(s)");
    std::vector<Frame> callers(std::make_move_iterator(frames_.begin() + 1),
                               std::make_move_iterator(frames_.end()));
    frames_.resize(1);
    frames_.insert(frames_.end(), scopes.begin(), scopes.end());
    frames_.emplace_back();
    std::vector<bool> bound(m.params.size(), false);
    for (size_t k = 0; k < a.positional.size(); ++k) {
      frames_.back()[m.params[k].first] = a.positional[k];
      bound[k] = true;
    }
    for (const auto& [key, v] : a.keyword) {
      size_t k = 0;
      while (k < m.params.size() && m.params[k].first != key) ++k;
      if (k == m.params.size()) fail("macro '" + name + "' has no argument '" + key + "'");
      if (bound[k]) fail("macro '" + name + "' got multiple values for argument '" + key + "'");
      frames_.back()[key] = v;
      bound[k] = true;
    }
    for (size_t k = 0; k < m.params.size(); ++k) {  // in order: a default may use earlier ones
      if (bound[k]) continue;
      const auto& [param, dflt] = m.params[k];
      frames_.back()[param] =
          dflt ? eval(*dflt)
               : Value::undefined("macro '" + name + "': argument '" + param + "' is undefined");
    }
    std::string saved = std::move(out_);
    out_.clear();
    exec(m.body);
    std::string result = std::move(out_);
    out_ = std::move(saved);
    frames_.resize(1);
    for (Frame& f : callers) frames_.push_back(std::move(f));
    --call_depth_;
    return Value::string(std::move(result));
  }

  static Value loop_value(const std::vector<Value>& items, int64_t k) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict d = {{"index", Value::integer(k + 1)},
              {"index0", Value::integer(k)},
              {"revindex", Value::integer(n - k)},
              {"revindex0", Value::integer(n - k - 1)},
              {"first", Value::boolean(k == 0)},
              {"last", Value::boolean(k == n - 1)},
              {"length", Value::integer(n)},
              {"depth", Value::integer(1)},
              {"depth0", Value::integer(0)},
              {"previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item")},
              {"nextitem", k + 1 < n ? items[k + 1] : Value::undefined("there is no next item")},
              {"cycle", Value::function("loop.cycle", [k](const CallArgs& a) {
                 if (a.positional.empty() || !a.keyword.empty())
                   fail("loop.cycle: expected at least one positional argument");
                 return a.positional[k % a.positional.size()];
               })}};
    return Value::make_dict(std::move(d));
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
    for (const auto& [name, x] : e.kwargs) a.keyword.emplace_back(name, eval(*x));
    return a;
  }

  Value eval(const Expr& e) {
    return located_at(e, [&] { return eval_here(e); });
  }

  Value eval_here(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const auto& x : e.args) items.push_back(eval(*x));
        return e.kind == Expr::Kind::kList ? Value::make_list(std::move(items))
                                           : Value::make_tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t k = 0; k < e.args.size(); k += 2) {
          const Value key = eval(*e.args[k]);
          if (!key.is_string())
            fail("dict keys must be strings in the chat template interpreter, not " +
                 type_name(key));
          Value v = eval(*e.args[k + 1]);
          bool replaced = false;
          for (auto& kv : d)
            if (kv.first == key.s) {
              kv.second = v;
              replaced = true;
            }
          if (!replaced) d.emplace_back(key.s, std::move(v));
        }
        return Value::make_dict(std::move(d));
      }
      case Expr::Kind::kGetAttr:
        return get_attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::kGetItem:
        return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::kSlice: {
        const auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k]) : Value::none(); };
        return slice(eval(*e.args[0]), part(1), part(2), part(3));
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.args[0]);
        if (callee.kind != K::kFunction) {
          if (callee.is_undefined()) fail_undefined(callee);
          fail(std::string("'").append(type_name(callee)) + "' object is not callable");
        }
        return (*callee.fn)(eval_args(e, 1));
      }
      case Expr::Kind::kFilter:
        return apply_filter(e.name, eval(*e.args[0]), eval_args(e, 1));
      case Expr::Kind::kTest:
        return Value::boolean(apply_test(e.name, eval(*e.args[0]), eval_args(e, 1)) != e.negated);
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        return unary_op(e.name, v);
      }
      case Expr::Kind::kBinary: {
        const Value a = eval(*e.args[0]);
        // and/or return an operand, as Python does, and skip the right one when they can.
        if (e.name == "and") return truthy(a) ? eval(*e.args[1]) : a;
        if (e.name == "or") return truthy(a) ? a : eval(*e.args[1]);
        return binary_op(e.name, a, eval(*e.args[1]));
      }
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCondition:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the condition was false");
    }
    return Value();
  }

  std::vector<Frame> frames_;
  std::string out_;
  int loop_depth_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(parse(tokenize(source))) {}

std::string Template::render(const Value& context) const { return Renderer(context).run(body_); }

}  // namespace tessera::inference::jinja
