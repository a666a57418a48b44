#include <algorithm>
#include <cmath>
#include <map>

#include "tessera/inference/jinja/arg_reader.h"
#include "tessera/inference/jinja/builtins.h"
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
    const bool digits =
        !part.empty() && part.size() < 19 &&
        std::all_of(part.begin(), part.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
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

// Python's str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029 end lines.
std::vector<std::u32string> splitlines(const std::u32string& u) {
  std::vector<std::u32string> lines;
  size_t start = 0;
  for (size_t k = 0; k < u.size(); ++k) {
    const char32_t c = u[k];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
        c == 0x2028 || c == 0x2029) {
      lines.push_back(u.substr(start, k - start));
      if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') ++k;
      start = k + 1;
    }
  }
  if (start < u.size()) lines.push_back(u.substr(start));
  return lines;
}

Value f_indent(const Value& v, const CallArgs& a) {
  // Jinja 3.1's: every line but the first (and blank ones, unless blank=true) gets the
  // indentation; first=true indents the first line too.
  ArgReader r(a, "indent", {"width", "first", "blank"});
  const Value width = r.value("width", Value::integer(4));
  const std::string pad =
      width.is_string() ? width.s : std::string(std::max<int64_t>(r.integer("width", 4), 0), ' ');
  const std::vector<std::u32string> lines = splitlines(decode_utf8(text_of(v) + "\n"));
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const std::string line = encode_utf8(lines[k]);
    if (k > 0) out += "\n";
    if (k > 0 && (r.flag("blank", false) || !line.empty())) out += pad;
    out += line;
  }
  return Value::string(r.flag("first", false) ? pad + out : out);
}

// unique/min/max compare strings case-insensitively unless case_sensitive=true, like Jinja.
Value comparison_key(const Value& item, const ArgReader& r) {
  const std::optional<std::string> attribute = r.str("attribute");
  Value key = attribute ? attribute_path(item, *attribute) : item;
  if (key.is_string() && !r.flag("case_sensitive", false)) key = Value::string(lower(key.s));
  return key;
}

Value f_unique(const Value& v, const CallArgs& a) {
  ArgReader r(a, "unique", {"case_sensitive", "attribute"});
  List out, seen;
  for (const Value& item : iterate(v)) {
    const Value key = comparison_key(item, r);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); }))
      continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return list_of(std::move(out));
}

Value f_min_max(const Value& v, const CallArgs& a, bool max) {
  ArgReader r(a, max ? "max" : "min", {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("no " + r.callee() + " of an empty sequence");
  size_t best = 0;
  Value best_key = comparison_key(items[0], r);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = comparison_key(items[k], r);
    if (compare(max ? ">" : "<", key, best_key)) {
      best = k;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_sum(const Value& v, const CallArgs& a) {
  ArgReader r(a, "sum", {"attribute", "start"});
  const std::optional<std::string> attribute = r.str("attribute");
  Value total = r.value("start", Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op("+", total, attribute ? attribute_path(item, *attribute) : item);
  return total;
}

// Refuses any argument: a filter that takes none.
void no_args(const char* name, const CallArgs& a) { ArgReader(a, name, {}); }

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
      {"indent", f_indent},
      {"unique", f_unique},
      {"min", [](const Value& v, const CallArgs& a) { return f_min_max(v, a, false); }},
      {"max", [](const Value& v, const CallArgs& a) { return f_min_max(v, a, true); }},
      {"sum", f_sum},
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

}  // namespace

bool has_filter(std::string_view name) { return filters().count(name) > 0; }
Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end())
    fail("filter '" + name + "' is not supported by the chat template interpreter");
  return it->second(v, args);
}

}  // namespace tessera::inference::jinja
