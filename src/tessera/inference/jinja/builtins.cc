#include "tessera/inference/jinja/builtins.h"

#include <ctime>
#include <map>
#include <set>

#include "tessera/inference/jinja/arg_reader.h"
#include "tessera/inference/jinja/operators.h"
#include "tessera/inference/jinja/str_methods.h"

namespace tessera::inference::jinja {
namespace {

using K = Value::Kind;

bool same(const Value& a, const Value& b) {  // Python's `is`, for the values it is used on
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::kList:
    case K::kTuple:
      return a.list == b.list;
    case K::kDict:
      return a.dict == b.dict;
    default:
      return equals(a, b);
  }
}

const std::set<std::string, std::less<>> kTests = {
    "defined",  "undefined", "none",   "boolean", "true",        "false",
    "integer",  "float",     "number", "string",  "mapping",     "iterable",
    "sequence", "callable",  "even",   "odd",     "divisibleby", "eq",
    "equalto",  "==",        "ne",     "!=",      "lt",          "lessthan",
    "<",        "le",        "<=",     "gt",      "greaterthan", ">",
    "ge",       ">=",        "in",     "lower",   "upper",       "sameas"};

}  // namespace

bool has_test(std::string_view name) { return kTests.count(name) > 0; }

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  static const std::map<std::string, std::string, std::less<>> kOps = {
      {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
      {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
      {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
  if (const auto op = kOps.find(name); op != kOps.end()) {
    ArgReader r(args, "test " + name, {"other"});
    return compare(op->second, v, r.required("other"));
  }
  if (name == "in") {
    ArgReader r(args, "test in", {"seq"});
    return compare("in", v, r.required("seq"));
  }
  if (name == "sameas") {
    ArgReader r(args, "test sameas", {"other"});
    return same(v, r.required("other"));
  }
  if (name == "divisibleby") {
    ArgReader r(args, "test divisibleby", {"num"});
    const Value num = r.required("num");
    return compare("==", binary_op("%", v, num), Value::integer(0));
  }
  ArgReader r(args, "test " + name, {});
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable")
    return v.is_string() || v.is_sequence() || v.kind == K::kDict || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_sequence() || v.kind == K::kDict;
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "even" || name == "odd") {
    const Value m = binary_op("%", v, Value::integer(2));
    return truthy(m) == (name == "odd");
  }
  if (name == "lower") return is_lower(to_str(v));
  if (name == "upper") return is_upper(to_str(v));
  fail("test '" + name + "' is not supported by the chat template interpreter");
}

namespace {

// Python's own method names: asking for one the interpreter lacks is an error when called, not
// a silent Undefined that a template might test and skip past.
const std::set<std::string, std::less<>> kPythonStrMethods = {
    "casefold",   "center",    "encode",    "expandtabs",   "format",    "format_map",  "index",
    "isalnum",    "isascii",   "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle",
    "ljust",      "partition", "rfind",     "rindex",       "rjust",     "rpartition",  "rsplit",
    "splitlines", "swapcase",  "translate", "zfill",        "maketrans"};
const std::set<std::string, std::less<>> kPythonListMethods = {
    "append", "clear", "copy",   "count",   "extend", "index",
    "insert", "pop",   "remove", "reverse", "sort"};
const std::set<std::string, std::less<>> kPythonDictMethods = {
    "clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};

Value missing(const Value& obj, const std::string& name, bool python_method) {
  if (python_method)
    return Value::undefined("the " + type_name(obj) + " method '" + name +
                            "' is not supported by the chat template interpreter");
  return Value::undefined(std::string("'").append(type_name(obj)) + " object' has no attribute '" +
                          name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  const std::shared_ptr<const Dict> d = self.dict;
  return Value::function("dict." + name, [d, name](const CallArgs& a) {
    if (name == "get") {
      ArgReader r(a, "dict.get", {"key", "default"});
      const Value key = r.required("key");
      const Value* v = key.is_string() ? find_key(*d, key.s) : nullptr;
      return v ? *v : r.value("default");
    }
    ArgReader r(a, "dict." + name, {});
    List out;
    for (const auto& [k, v] : *d) {
      if (name == "keys")
        out.push_back(Value::string(k));
      else if (name == "values")
        out.push_back(v);
      else
        out.push_back(Value::make_tuple({Value::string(k), v}));
    }
    return Value::make_list(std::move(out));
  });
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case K::kUndefined:
      fail_undefined(obj);
    case K::kDict:
      if (name == "get" || name == "items" || name == "keys" || name == "values")
        return dict_method(obj, name);
      if (kPythonDictMethods.count(name)) return missing(obj, name, true);
      if (const Value* v = find_key(*obj.dict, name)) return *v;
      return missing(obj, name, false);
    case K::kNamespace:
      if (const Value* v = find_key(*obj.ns, name)) return *v;
      return missing(obj, name, false);
    case K::kString:
      if (auto m = str_method(obj, name)) return *m;
      return missing(obj, name, kPythonStrMethods.count(name) > 0);
    case K::kList:
    case K::kTuple:
      return missing(obj, name, kPythonListMethods.count(name) > 0);
    default:
      return missing(obj, name, false);
  }
}

Value global(const std::string& name) {
  if (name == "range") {
    return Value::function("range", [](const CallArgs& a) {
      if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3)
        fail("range: expected 1 to 3 integer arguments");
      int64_t v[3] = {0, 0, 1};
      for (size_t k = 0; k < a.positional.size(); ++k) {
        const Value& x = a.positional[k];
        if (x.kind != K::kInt && x.kind != K::kBool)
          fail("range: expected integers, not " + type_name(x));
        v[a.positional.size() == 1 ? 1 : k] = x.kind == K::kInt ? x.i : x.b;
      }
      if (v[2] == 0) fail("range: step must not be zero");
      List out;
      for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
        if (out.size() >= 100000)  // Jinja's sandbox limit (MAX_RANGE)
          fail("range: more than 100000 items (the sandbox's limit)");
        out.push_back(Value::integer(i));
      }
      return Value::make_list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value::function(name, [ns, name](const CallArgs& a) {
      Dict d;
      if (a.positional.size() > 1 || (a.positional.size() == 1 && a.positional[0].kind != K::kDict))
        fail(name + ": expected at most one mapping and keyword arguments");
      const auto put = [&](const std::string& k, const Value& v) {
        for (auto& kv : d)
          if (kv.first == k) {
            kv.second = v;
            return;
          }
        d.emplace_back(k, v);
      };
      if (!a.positional.empty())
        for (const auto& [k, v] : *a.positional[0].dict) put(k, v);
      for (const auto& [k, v] : a.keyword) put(k, v);
      return ns ? Value::make_namespace(std::move(d)) : Value::make_dict(std::move(d));
    });
  }
  if (name == "raise_exception") {
    return Value::function(name, [](const CallArgs& a) -> Value {
      ArgReader r(a, "raise_exception", {"message"});
      throw TemplateRaised(to_str(r.value("message", Value::string(""))));
    });
  }
  if (name == "strftime_now") {  // Hugging Face's: datetime.now().strftime(format)
    return Value::function(name, [](const CallArgs& a) {
      ArgReader r(a, "strftime_now", {"format"});
      const Value f = r.required("format");
      if (!f.is_string()) fail("strftime_now: expected a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, f.s.c_str(), &local);
      return Value::string(std::string(buf, n));
    });
  }
  if (name == "lipsum" || name == "cycler" || name == "joiner")
    return Value::undefined("the global '" + name +
                            "' is not supported by the chat template interpreter");
  return Value::undefined("'" + name + "' is undefined");
}

}  // namespace tessera::inference::jinja
