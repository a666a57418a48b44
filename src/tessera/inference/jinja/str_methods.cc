#include "tessera/inference/jinja/str_methods.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "tessera/inference/jinja/arg_reader.h"
#include "tessera/inference/jinja/operators.h"

namespace tessera::inference::jinja {

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::u32string u = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  const auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_python_space(c);
  };
  size_t lo = 0, hi = u.size();
  while (left && lo < hi && strippable(u[lo])) ++lo;
  while (right && hi > lo && strippable(u[hi - 1])) --hi;
  return encode_utf8(std::u32string_view(u).substr(lo, hi - lo));
}

std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("split: empty separator");
    size_t from = 0;
    for (size_t at; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                    (at = s.find(*sep, from)) != std::string::npos;
         from = at + sep->size())
      out.push_back(s.substr(from, at - from));
    out.push_back(s.substr(from));
    return out;
  }
  const std::u32string u = decode_utf8(s);
  size_t k = 0;
  while (true) {
    while (k < u.size() && is_python_space(u[k])) ++k;
    if (k == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t end = u.size();
      while (end > k && is_python_space(u[end - 1])) --end;
      out.push_back(encode_utf8(u.substr(k, end - k)));
      break;
    }
    const size_t start = k;
    while (k < u.size() && !is_python_space(u[k])) ++k;
    out.push_back(encode_utf8(u.substr(start, k - start)));
  }
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t n = 0;
    for (const char32_t c : decode_utf8(s)) {
      if (count < 0 || n++ < count) out += with;
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t from = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(old, from);
    if (at == std::string::npos) break;
    out += s.substr(from, at - from) + with;
    from = at + old.size();
  }
  return out + s.substr(from);
}

namespace {

enum class Case { kUpper, kLower, kTitle };

// ICU's full case mapping in the root locale (Python's own mapping is the same Unicode data).
std::string map_case(const std::string& s, Case which) {
  if (s.empty()) return s;
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  std::u16string in(n16, u'\0');
  err = U_ZERO_ERROR;
  u_strFromUTF8(in.data(), n16, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  std::u16string out(in.size() * 3 + 8, u'\0');  // a full mapping grows a character to 3 at most
  err = U_ZERO_ERROR;
  int32_t n = 0;
  if (which == Case::kUpper)
    n = u_strToUpper(out.data(), static_cast<int32_t>(out.size()), in.data(), n16, "", &err);
  else if (which == Case::kLower)
    n = u_strToLower(out.data(), static_cast<int32_t>(out.size()), in.data(), n16, "", &err);
  else
    n = u_strToTitle(out.data(), static_cast<int32_t>(out.size()), in.data(), n16, nullptr, "",
                     &err);
  if (U_FAILURE(err)) fail(std::string("case mapping failed: ") + u_errorName(err));
  std::string result(static_cast<size_t>(n) * 3 + 4, '\0');
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(result.data(), static_cast<int32_t>(result.size()), &n8, out.data(), n, &err);
  if (U_FAILURE(err)) fail(std::string("case mapping failed: ") + u_errorName(err));
  result.resize(n8);
  return result;
}

std::string map_char(char32_t c, Case which) { return map_case(encode_utf8({&c, 1}), which); }
bool is_cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

}  // namespace

std::string upper(const std::string& s) { return map_case(s, Case::kUpper); }
std::string lower(const std::string& s) { return map_case(s, Case::kLower); }

std::string python_title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (const char32_t c : decode_utf8(s)) {
    out += map_char(c, previous_cased ? Case::kLower : Case::kTitle);
    previous_cased = is_cased(c);
  }
  return out;
}

std::string python_capitalize(const std::string& s) {
  const std::u32string u = decode_utf8(s);
  if (u.empty()) return s;
  return map_char(u[0], Case::kTitle) + lower(encode_utf8(std::u32string_view(u).substr(1)));
}

std::string jinja_title(const std::string& s) {
  // Jinja: split at runs of [-\s({\[<], each piece's first character upper-cased and the rest
  // lower-cased.
  const std::u32string u = decode_utf8(s);
  const auto separator = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
  };
  std::string out;
  for (size_t k = 0; k < u.size();) {
    size_t e = k;
    const bool sep = separator(u[k]);
    while (e < u.size() && separator(u[e]) == sep) ++e;
    const std::u32string_view piece = std::u32string_view(u).substr(k, e - k);
    out += upper(encode_utf8(piece.substr(0, 1))) + lower(encode_utf8(piece.substr(1)));
    k = e;
  }
  return out;
}

namespace {

// Python's islower/isupper: some cased character, and none of the other case.
bool has_case(const std::string& s, bool want_lower) {
  bool cased = false;
  for (const char32_t c : decode_utf8(s)) {
    const bool lo = u_islower(static_cast<UChar32>(c)) || u_hasBinaryProperty(c, UCHAR_LOWERCASE);
    const bool up = u_isupper(static_cast<UChar32>(c)) || u_istitle(static_cast<UChar32>(c));
    if ((want_lower && up) || (!want_lower && lo)) return false;
    cased = cased || (want_lower ? lo : up);
  }
  return cased;
}

// A str argument, or a tuple of them (startswith/endswith take either).
std::vector<std::string> affixes(const Value& v, const std::string& callee) {
  if (v.is_string()) return {v.s};
  std::vector<std::string> out;
  if (v.kind == Value::Kind::kTuple) {
    for (const Value& x : *v.list) {
      if (!x.is_string()) break;
      out.push_back(x.s);
    }
    if (out.size() == v.list->size()) return out;
  }
  fail(callee + ": expected a string or a tuple of strings, not " + type_name(v));
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string u = decode_utf8(s);
  if (u.empty()) return false;
  for (const char32_t c : u)
    if (!pred(c)) return false;
  return true;
}

Value call(const std::string& self, const std::string& name, const CallArgs& a) {
  const std::string callee = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader r(a, callee, {"chars"});
    return Value::string(strip(self, r.str("chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    ArgReader r(a, callee, {"sep", "maxsplit"});
    List out;
    for (auto& piece : split(self, r.str("sep"), r.integer("maxsplit", -1)))
      out.push_back(Value::string(std::move(piece)));
    return Value::make_list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    ArgReader r(a, callee, {"prefix"});
    for (const std::string& x : affixes(r.required("prefix"), callee)) {
      if (x.size() > self.size()) continue;
      if (name == "startswith" ? self.compare(0, x.size(), x) == 0
                               : self.compare(self.size() - x.size(), x.size(), x) == 0)
        return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "isspace" || name == "isdigit" || name == "isalpha" || name == "islower" ||
      name == "isupper") {
    ArgReader r(a, callee, {});
    if (name == "upper") return Value::string(upper(self));
    if (name == "lower") return Value::string(lower(self));
    if (name == "title") return Value::string(python_title(self));
    if (name == "capitalize") return Value::string(python_capitalize(self));
    if (name == "islower") return Value::boolean(is_lower(self));
    if (name == "isupper") return Value::boolean(is_upper(self));
    if (name == "isspace") return Value::boolean(all_chars(self, is_python_space));
    if (name == "isdigit")
      return Value::boolean(all_chars(self, [](char32_t c) { return u_isdigit(c) != 0; }));
    return Value::boolean(all_chars(self, [](char32_t c) { return u_isalpha(c) != 0; }));
  }
  if (name == "replace") {
    ArgReader r(a, callee, {"old", "new", "count"});
    const Value old = r.required("old"), with = r.required("new");
    if (!old.is_string() || !with.is_string()) fail(callee + ": expected strings");
    return Value::string(replace(self, old.s, with.s, r.integer("count", -1)));
  }
  if (name == "find" || name == "count") {
    ArgReader r(a, callee, {"sub"});
    const Value sub = r.required("sub");
    if (!sub.is_string()) fail(callee + ": expected a string, not " + type_name(sub));
    if (name == "find") {
      const size_t at = self.find(sub.s);
      return Value::integer(at == std::string::npos
                                ? -1
                                : static_cast<int64_t>(decode_utf8(self.substr(0, at)).size()));
    }
    if (sub.s.empty()) return Value::integer(static_cast<int64_t>(decode_utf8(self).size()) + 1);
    int64_t n = 0;
    for (size_t at = self.find(sub.s); at != std::string::npos;
         at = self.find(sub.s, at + sub.s.size()))
      ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    ArgReader r(a, callee, {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& x : iterate(r.required("iterable"))) {
      if (!x.is_string()) fail(callee + ": expected str items, found " + type_name(x));
      out += (first ? "" : self) + x.s;
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader r(a, callee, {"affix"});
    const Value x = r.required("affix");
    if (!x.is_string()) fail(callee + ": expected a string, not " + type_name(x));
    if (name == "removeprefix")
      return Value::string(self.compare(0, x.s.size(), x.s) == 0 ? self.substr(x.s.size()) : self);
    const bool ends =
        x.s.size() <= self.size() && self.compare(self.size() - x.s.size(), x.s.size(), x.s) == 0;
    return Value::string(ends ? self.substr(0, self.size() - x.s.size()) : self);
  }
  fail(callee + " is not supported by the chat template interpreter");
}

}  // namespace

bool is_lower(const std::string& s) { return has_case(s, true); }
bool is_upper(const std::string& s) { return has_case(s, false); }

std::optional<Value> str_method(const Value& self, const std::string& name) {
  static const char* const kSupported[] = {
      "strip",        "lstrip",       "rstrip",     "split",   "startswith", "endswith", "upper",
      "lower",        "title",        "capitalize", "replace", "find",       "count",    "join",
      "removeprefix", "removesuffix", "isspace",    "isdigit", "isalpha",    "islower",  "isupper"};
  for (const char* m : kSupported) {
    if (name != m) continue;
    const std::string text = self.s;
    return Value::function("str." + name,
                           [text, name](const CallArgs& a) { return call(text, name, a); });
  }
  return std::nullopt;
}

}  // namespace tessera::inference::jinja
