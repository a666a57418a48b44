// Jinja's operators on values, with Python's semantics (Jinja evaluates them in Python):
// int arithmetic stays int (an overflow of 64 bits is an error, where Python would grow), `/` is
// always float division, `//` and `%` floor toward negative infinity, `~` joins str() of both
// sides, `+` and `*` also join and repeat strings and lists. Anything Python would raise on
// (1 + "a", 1 < "a", division by zero) is a RenderError; so is using an Undefined value in
// arithmetic (Jinja's default Undefined raises there too). Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

Value binary_op(const std::string& op, const Value& a, const Value& b);  // + - * / // % ** ~
Value unary_op(const std::string& op, const Value& v);                   // - +
bool compare(const std::string& op, const Value& a, const Value& b);     // == != < <= > >= in notin

// obj[key] as Jinja's getitem does it: a list or str index (negative from the end), a dict key,
// falling back to an attribute for a string key; Undefined when absent.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists, tuples and strings (per code point); absent parts Undefined.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// What `for x in v` visits: list and tuple items, dict keys, a string's characters, nothing
// for Undefined. RenderError for anything else (None, a number).
std::vector<Value> iterate(const Value& v);
// Python's len(): characters of a str, items of a list or dict; 0 for Undefined.
int64_t length(const Value& v);
// An Undefined value's error: "'x' is undefined" (or why it is undefined).
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace tessera::inference::jinja
