#include "tessera/inference/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>

#include "tessera/inference/jinja/arg_reader.h"
#include "tessera/inference/jinja/operators.h"
#include "tessera/inference/jinja/str_methods.h"

namespace tessera::inference::jinja {
namespace {

using K = Value::Kind;
using Filter = Value (*)(const Value&, const CallArgs&);

// soft_str: what Jinja's string filters make of their input (Undefined becomes "").
std::string text_of(const Value& v) { return to_str(v); }

Value list_of(std::vector<Value> items) { return Value::make_list(std::move(items)); }

// obj.attr.attr... as Jinja's make_attrgetter reads `attribute=` (digits index a sequence).
Value attribute_path(const Value& obj, const std::string& path) {
  Value v = obj;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string part = path.substr(from, dot == std::string::npos ? dot : dot - from);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return v;
    from = dot + 1;
  }
}

// The arguments after the first `skip` positional ones (select's test arguments, map's filter
// arguments).
CallArgs rest(const CallArgs& a, size_t skip) {
  CallArgs out;
  for (size_t k = skip; k < a.positional.size(); ++k) out.positional.push_back(a.positional[k]);
  out.keyword = a.keyword;
  return out;
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test is `keep`.
Value select(const Value& v, const CallArgs& a, bool by_attribute, bool keep, const char* name) {
  size_t k = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty() || !a.positional[0].is_string())
      fail(std::string(name) + ": expected an attribute name");
    attribute = a.positional[k++].s;
  }
  std::string test;
  if (k < a.positional.size()) {
    if (!a.positional[k].is_string()) fail(std::string(name) + ": expected a test name");
    test = a.positional[k++].s;
    if (!has_test(test))
      fail(std::string(name) + ": test '" + test +
           "' is not supported by the chat template interpreter");
  }
  const CallArgs test_args = rest(a, k);
  if (test.empty() && (!test_args.keyword.empty()))
    fail(std::string(name) + ": unexpected keyword arguments");
  List out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attribute ? attribute_path(item, attribute) : item;
    const bool pass = test.empty() ? truthy(x) : apply_test(test, x, test_args);
    if (pass == keep) out.push_back(item);
  }
  return list_of(std::move(out));
}

Value f_map(const Value& v, const CallArgs& a) {
  const Value* attribute = nullptr;
  Value dflt = Value::undefined("");
  bool has_default = false;
  for (const auto& [k, x] : a.keyword) {
    if (k == "attribute") {
      attribute = &x;
    } else if (k == "default") {
      dflt = x;
      has_default = true;
    }
  }
  List out;
  if (attribute) {
    if (!a.positional.empty() || a.keyword.size() != 1u + has_default || !attribute->is_string())
      fail("map: expected attribute='name' and optionally default=");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, attribute->s);
      out.push_back(x.is_undefined() && has_default ? dflt : x);
    }
    return list_of(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string())
    fail("map: expected a filter name or attribute=");
  const std::string filter = a.positional[0].s;
  if (!has_filter(filter))
    fail("map: filter '" + filter + "' is not supported by the chat template interpreter");
  const CallArgs filter_args = rest(a, 1);
  for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, filter_args));
  return list_of(std::move(out));
}

Value f_tojson(const Value& v, const CallArgs& a) {
  // Hugging Face's override of Jinja's tojson: json.dumps(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False), without Jinja's HTML escaping.
  ArgReader r(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  st.ensure_ascii = r.flag("ensure_ascii", false);
  st.sort_keys = r.flag("sort_keys", false);
  const Value indent = r.value("indent");
  if (indent.kind == K::kInt) {
    st.indent_set = true;
    st.indent_text = std::string(std::max<int64_t>(indent.i, 0), ' ');
  } else if (indent.is_string()) {
    st.indent_set = true;
    st.indent_text = indent.s;
  } else if (indent.kind != K::kNone) {
    fail("tojson: indent must be an integer or a string");
  }
  if (st.indent_set) st.item_separator = ",";
  const Value sep = r.value("separators");
  if (sep.kind != K::kNone) {
    if (!sep.is_sequence() || sep.list->size() != 2 || !(*sep.list)[0].is_string() ||
        !(*sep.list)[1].is_string())
      fail("tojson: separators must be a pair of strings");
    st.item_separator = (*sep.list)[0].s;
    st.key_separator = (*sep.list)[1].s;
  }
  return Value::string(to_json(v, st));
}

Value f_default(const Value& v, const CallArgs& a) {
  ArgReader r(a, "default", {"default_value", "boolean"});
  const bool use_default = v.is_undefined() || (r.flag("boolean", false) && !truthy(v));
  return use_default ? r.value("default_value", Value::string("")) : v;
}

Value f_first_last(const Value& v, bool first) {
  if (v.is_string()) {
    const std::u32string u = decode_utf8(v.s);
    if (u.empty()) return Value::undefined("no first or last item of an empty string");
    return Value::string(encode_utf8({first ? &u.front() : &u.back(), 1}));
  }
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("no first or last item of an empty sequence");
  return first ? items.front() : items.back();
}

Value f_join(const Value& v, const CallArgs& a) {
  ArgReader r(a, "join", {"d", "attribute"});
  const std::string sep = r.str("d").value_or("");
  const std::optional<std::string> attribute = r.str("attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    out += (first ? "" : sep) + text_of(attribute ? attribute_path(item, *attribute) : item);
    first = false;
  }
  return Value::string(std::move(out));
}

Value f_int(const Value& v, const CallArgs& a) {
  ArgReader r(a, "int", {"default", "base"});
  const Value dflt = r.value("default", Value::integer(0));
  if (v.kind == K::kInt) return v;
  if (v.kind == K::kBool) return Value::integer(v.b);
  if (v.kind == K::kFloat)
    return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(std::trunc(v.f))) : dflt;
  if (v.is_string()) {
    const std::string s = strip(v.s, std::nullopt, true, true);
    const int base = static_cast<int>(r.integer("base", 10));
    try {
      size_t used = 0;
      const int64_t i = std::stoll(s, &used, base);
      if (used == s.size()) return Value::integer(i);
    } catch (const std::exception&) {
    }
    try {  // Jinja falls back to int(float(value))
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value f_float(const Value& v, const CallArgs& a) {
  ArgReader r(a, "float", {"default"});
  if (v.is_number()) return Value::real(v.kind == K::kFloat ? v.f : v.kind == K::kInt ? v.i : v.b);
  if (v.is_string()) {
    try {
      const std::string s = strip(v.s, std::nullopt, true, true);
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value::real(d);
    } catch (const std::exception&) {
    }
  }
  return r.value("default", Value::real(0.0));
}

Value f_sort(const Value& v, const CallArgs& a) {
  ArgReader r(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = r.flag("reverse", false), case_sensitive = r.flag("case_sensitive", false);
  const std::optional<std::string> attribute = r.str("attribute");
  std::vector<std::pair<Value, Value>> keyed;  // (key, item)
  for (const Value& item : iterate(v)) {
    Value key = attribute ? attribute_path(item, *attribute) : item;
    if (key.is_string() && !case_sensitive) key = Value::string(lower(key.s));
    keyed.emplace_back(std::move(key), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare("<", y.first, x.first) : compare("<", x.first, y.first);
  });
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return list_of(std::move(out));
}

Value no_args(const char* name, const CallArgs& a) {
  ArgReader r(a, name, {});
  return Value();
}

const std::map<std::string, Filter, std::less<>>& filters() {
  static const std::map<std::string, Filter, std::less<>> table = {
      {"trim",
       [](const Value& v, const CallArgs& a) {
         ArgReader r(a, "trim", {"chars"});
         return Value::string(strip(text_of(v), r.str("chars"), true, true));
       }},
      {"length",
       [](const Value& v, const CallArgs& a) {
         no_args("length", a);
         return Value::integer(length(v));
       }},
      {"count",
       [](const Value& v, const CallArgs& a) {
         no_args("count", a);
         return Value::integer(length(v));
       }},
      {"upper",
       [](const Value& v, const CallArgs& a) {
         no_args("upper", a);
         return Value::string(upper(text_of(v)));
       }},
      {"lower",
       [](const Value& v, const CallArgs& a) {
         no_args("lower", a);
         return Value::string(lower(text_of(v)));
       }},
      {"capitalize",
       [](const Value& v, const CallArgs& a) {
         no_args("capitalize", a);
         return Value::string(python_capitalize(text_of(v)));
       }},
      {"title",
       [](const Value& v, const CallArgs& a) {
         no_args("title", a);
         return Value::string(jinja_title(text_of(v)));
       }},
      {"string",
       [](const Value& v, const CallArgs& a) {
         no_args("string", a);
         return Value::string(text_of(v));
       }},
      {"safe",
       [](const Value& v, const CallArgs& a) {  // no autoescaping: nothing to mark
         no_args("safe", a);
         return v;
       }},
      {"tojson", f_tojson},
      {"default", f_default},
      {"d", f_default},
      {"first",
       [](const Value& v, const CallArgs& a) {
         no_args("first", a);
         return f_first_last(v, true);
       }},
      {"last",
       [](const Value& v, const CallArgs& a) {
         no_args("last", a);
         return f_first_last(v, false);
       }},
      {"join", f_join},
      {"replace",
       [](const Value& v, const CallArgs& a) {
         ArgReader r(a, "replace", {"old", "new", "count"});
         const Value old = r.required("old"), with = r.required("new");
         return Value::string(
             replace(text_of(v), text_of(old), text_of(with), r.integer("count", -1)));
       }},
      {"int", f_int},
      {"float", f_float},
      {"abs",
       [](const Value& v, const CallArgs& a) {
         no_args("abs", a);
         if (v.kind == K::kFloat) return Value::real(std::fabs(v.f));
         const Value i = v.kind == K::kBool ? Value::integer(v.b) : v;
         return i.kind == K::kInt && i.i < 0 ? unary_op("-", i) : unary_op("+", i);
       }},
      {"list",
       [](const Value& v, const CallArgs& a) {
         no_args("list", a);
         return list_of(iterate(v));
       }},
      {"reverse",
       [](const Value& v, const CallArgs& a) {
         no_args("reverse", a);
         if (v.is_string()) {
           std::u32string u = decode_utf8(v.s);
           std::reverse(u.begin(), u.end());
           return Value::string(encode_utf8(u));
         }
         std::vector<Value> items = iterate(v);
         std::reverse(items.begin(), items.end());
         return list_of(std::move(items));
       }},
      {"items",
       [](const Value& v, const CallArgs& a) {
         no_args("items", a);
         if (v.is_undefined()) return list_of({});
         if (v.kind != K::kDict) fail("items: expected a mapping, not " + type_name(v));
         List out;
         for (const auto& [k, x] : *v.dict) out.push_back(Value::make_tuple({Value::string(k), x}));
         return list_of(std::move(out));
       }},
      {"sort", f_sort},
      {"map", f_map},
      {"select",
       [](const Value& v, const CallArgs& a) { return select(v, a, false, true, "select"); }},
      {"reject",
       [](const Value& v, const CallArgs& a) { return select(v, a, false, false, "reject"); }},
      {"selectattr",
       [](const Value& v, const CallArgs& a) { return select(v, a, true, true, "selectattr"); }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) { return select(v, a, true, false, "rejectattr"); }},
  };
  return table;
}

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

bool has_filter(std::string_view name) { return filters().count(name) > 0; }
bool has_test(std::string_view name) { return kTests.count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end())
    fail("filter '" + name + "' is not supported by the chat template interpreter");
  return it->second(v, args);
}

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
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
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
