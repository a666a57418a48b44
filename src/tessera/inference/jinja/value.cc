#include "tessera/inference/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tessera::inference::jinja {

Value Value::undefined(std::string why) {
  Value v;
  v.s = std::move(why);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::real(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(s);
  return v;
}
Value Value::make_list(List l) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(l));
  return v;
}
Value Value::make_tuple(List l) {
  Value v = make_list(std::move(l));
  v.kind = Kind::kTuple;
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict d) {
  Value v;
  v.kind = Kind::kNamespace;
  v.ns = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::function(std::string name, Function f) {
  Value v;
  v.kind = Kind::kFunction;
  v.s = std::move(name);
  v.fn = std::make_shared<const Function>(std::move(f));
  return v;
}

void fail(const std::string& message) { throw RenderError(message); }

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !v.list->empty();
    case Value::Kind::kDict:
      return !v.dict->empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Python's repr: the shortest round-tripping digits, positional for exponents -4..15 and
  // scientific (at least two exponent digits) outside, always with a '.' or an 'e'.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string out = std::signbit(d) ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
    if (digits.size() <= static_cast<size_t>(exp) + 1)
      return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string repr_items(const Dict& d) {
  std::string out;
  for (const auto& [k, v] : d) {
    if (!out.empty()) out += ", ";
    out += repr_string(k) + ": " + repr(v);
  }
  return "{" + out + "}";
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return format_float(v.f);
    case Value::Kind::kString:
      return repr_string(v.s);
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      std::string out;
      for (const Value& x : *v.list) out += (out.empty() ? "" : ", ") + repr(x);
      if (v.kind == Value::Kind::kList) return "[" + out + "]";
      return "(" + out + (v.list->size() == 1 ? ",)" : ")");
    }
    case Value::Kind::kDict:
      return repr_items(*v.dict);
    case Value::Kind::kNamespace:
      return "<Namespace " + repr_items(*v.ns) + ">";
    case Value::Kind::kFunction:
      return "<built-in function " + v.s + ">";
  }
  return "";
}

std::string to_str(const Value& v) {
  if (v.kind == Value::Kind::kUndefined) return "";
  if (v.kind == Value::Kind::kString) return v.s;
  return repr(v);
}

namespace {

double as_double(const Value& v) {
  return v.kind == Value::Kind::kFloat ? v.f
         : v.kind == Value::Kind::kInt ? static_cast<double>(v.i)
                                       : (v.b ? 1.0 : 0.0);
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat)
      return (a.kind == Value::Kind::kInt ? a.i : a.b) == (b.kind == Value::Kind::kInt ? b.i : b.b);
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return a.list->size() == b.list->size() &&
             std::equal(a.list->begin(), a.list->end(), b.list->begin(), equals);
    case Value::Kind::kDict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = find_key(*b.dict, k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return a.ns == b.ns;
    case Value::Kind::kFunction:
      return a.fn == b.fn;
    default:
      return false;
  }
}

const Value* find_key(const Dict& d, std::string_view key) {
  for (const auto& kv : d)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

template <typename Json>
Value value_of(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw Error("chat template context: integer " + std::to_string(u) +
                    " is beyond the 64-bit range the template interpreter supports");
      return Value::integer(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::real(j.template get<double>());
    case Json::value_t::string:
      return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(value_of(x));
      return Value::make_list(std::move(l));
    }
    case Json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.emplace_back(k, value_of(x));
      return Value::make_dict(std::move(d));
    }
    default:
      throw Error("chat template context: binary JSON values are not supported");
  }
}

}  // namespace

Value from_json(const nlohmann::json& j) { return value_of(j); }
Value from_json(const nlohmann::ordered_json& j) { return value_of(j); }

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (const char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c >= 0x7f && c < 0x10000)) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else if (ensure_ascii && c >= 0x10000) {  // a UTF-16 surrogate pair, as Python writes
          const unsigned u = static_cast<unsigned>(c) - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (u >> 10),
                        0xdc00 + (u & 0x3ff));
          out += buf;
        } else {
          append_utf8(out, c);
        }
      }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonStyle& st, int depth) {
  const auto newline = [&](int d) {
    if (!st.indent_set) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += st.indent_text;
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Value::Kind::kFloat:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                               : format_float(v.f);
      return;
    case Value::Kind::kString:
      json_string(out, v.s, st.ensure_ascii);
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_separator;
        newline(depth + 1);
        json_value(out, (*v.list)[k], st, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.dict) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_separator;
        newline(depth + 1);
        json_string(out, items[k]->first, st.ensure_ascii);
        out += st.key_separator;
        json_value(out, items[k]->second, st, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail("tojson: an object of type '" + type_name(v) + "' is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const unsigned char c = s[k];
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    bool ok = n > 0 && k + n <= s.size();
    for (int m = 1; ok && m < n; ++m) {
      const unsigned char cc = s[k + m];
      ok = (cc >> 6) == 2;
      cp = (cp << 6) | (cc & 0x3f);
    }
    out.push_back(ok ? cp : 0xfffd);
    k += ok ? n : 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) append_utf8(out, c);
  return out;
}

}  // namespace tessera::inference::jinja
