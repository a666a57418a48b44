// Reads a filter's, test's, method's or function's arguments as Python binds them (by position
// or by keyword), with errors that name the callee. Refuses arguments the callee does not take,
// so a template never silently loses an argument the interpreter does not understand.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

class ArgReader {
 public:
  // `names`: the parameters in positional order.
  ArgReader(const CallArgs& args, std::string callee, std::vector<std::string> names)
      : args_(args), callee_(std::move(callee)), names_(std::move(names)) {
    if (args_.positional.size() > names_.size())
      fail(callee_ + ": takes at most " + std::to_string(names_.size()) + " arguments, got " +
           std::to_string(args_.positional.size()));
    for (const auto& [k, v] : args_.keyword) {
      bool known = false;
      for (size_t p = 0; p < names_.size(); ++p) {
        if (names_[p] != k) continue;
        known = true;
        if (p < args_.positional.size()) fail(callee_ + ": got multiple values for '" + k + "'");
      }
      if (!known) fail(callee_ + ": unexpected keyword argument '" + k + "'");
    }
  }

  const Value* find(const std::string& name) const {
    for (size_t p = 0; p < names_.size(); ++p) {
      if (names_[p] != name) continue;
      if (p < args_.positional.size()) return &args_.positional[p];
    }
    for (const auto& [k, v] : args_.keyword)
      if (k == name) return &v;
    return nullptr;
  }
  Value value(const std::string& name, Value dflt = Value::none()) const {
    const Value* v = find(name);
    return v ? *v : dflt;
  }
  Value required(const std::string& name) const {
    const Value* v = find(name);
    if (!v) fail(callee_ + ": missing argument '" + name + "'");
    return *v;
  }
  // A string argument (None or absent: nullopt).
  std::optional<std::string> str(const std::string& name) const {
    const Value* v = find(name);
    if (!v || v->kind == Value::Kind::kNone) return std::nullopt;
    if (!v->is_string()) fail(callee_ + ": '" + name + "' must be a string, not " + type_name(*v));
    return v->s;
  }
  int64_t integer(const std::string& name, int64_t dflt) const {
    const Value* v = find(name);
    if (!v || v->kind == Value::Kind::kNone) return dflt;
    if (v->kind == Value::Kind::kBool) return v->b;
    if (v->kind != Value::Kind::kInt)
      fail(callee_ + ": '" + name + "' must be an integer, not " + type_name(*v));
    return v->i;
  }
  // A flag's truth value; an Undefined one (a misspelt variable) is an error rather than false.
  bool flag(const std::string& name, bool dflt) const {
    const Value* v = find(name);
    if (v && v->is_undefined())
      fail(callee_ + ": '" + name + "': " + (v->s.empty() ? "undefined" : v->s));
    return v ? truthy(*v) : dflt;
  }
  const std::string& callee() const { return callee_; }

 private:
  const CallArgs& args_;
  std::string callee_;
  std::vector<std::string> names_;
};

}  // namespace tessera::inference::jinja
