// The parsed template: a tree of statements and expressions, immutable once parsed (so one
// Template renders on many threads at once). Every node keeps the line and column where it
// starts, for render-time errors.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args: items
    kTuple,      // args: items
    kDict,       // kwargs would need string keys; args: key0, value0, key1, value1, ...
    kGetAttr,    // args[0].name
    kGetItem,    // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:], kwargs); negated
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ... (Python's chained comparison)
    kCondition,  // args[1] if args[0] else args[2] (args[2] null: Undefined)
  };
  Kind kind;
  int line = 0, column = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body), a null condition for else
    kFor,       // for targets in expr [if filter]: body [else: else_body]
    kSet,       // set targets = expr; or set targets[0].attribute = expr (a namespace)
    kSetBlock,  // set targets[0] %} body {% endset
    kBreak,
    kContinue,
    kScope,  // a body rendered in place: Hugging Face's {% generation %} block
    kMacro,  // macro targets[0](params) %} body {% endmacro
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: names, defaults (or null)
  Body body, else_body;
};

}  // namespace tessera::inference::jinja
