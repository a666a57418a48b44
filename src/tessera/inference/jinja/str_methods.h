// Python's str methods and the string filters built on them, on UTF-8 text, per code point as
// Python works: whitespace is Python's (str.isspace), case mappings are Unicode's full mappings
// (ICU's root locale: "ß".upper() is "SS"), title() is Python's (a cased character after an
// uncased one starts a word). Stateless and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

bool is_python_space(char32_t c);

// strip/lstrip/rstrip: `chars` absent strips whitespace.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right);
// split(sep=None, maxsplit=-1): without `sep`, runs of whitespace separate and ends are ignored.
std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
// replace(old, new, count=-1); an empty `old` inserts `new` around every character, as Python.
std::string replace(const std::string& s, const std::string& old, const std::string& with,
                    int64_t count);
std::string upper(const std::string& s);
std::string lower(const std::string& s);
std::string python_title(const std::string& s);       // str.title()
std::string python_capitalize(const std::string& s);  // str.capitalize()
std::string jinja_title(const std::string& s);        // the |title filter
bool is_lower(const std::string& s);                  // str.islower()
bool is_upper(const std::string& s);                  // str.isupper()

// The str method `name` bound to `self` (strip, lstrip, rstrip, split, startswith, endswith,
// upper, lower, title, capitalize, replace, find, count, join, removeprefix, removesuffix,
// isspace, isdigit, isalpha, islower, isupper), or nullopt when the interpreter lacks it.
std::optional<Value> str_method(const Value& self, const std::string& name);

}  // namespace tessera::inference::jinja
