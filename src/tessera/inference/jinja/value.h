// The values a chat template computes with, modelled on the Python objects Jinja2 sees: None,
// bool, int, float, str, list, tuple, dict (insertion-ordered, string keys), Jinja's namespace,
// callables, and Jinja's default Undefined (prints as "", is false, iterates as empty; most
// other uses are an error that names what was undefined).
//
// Lists, tuples and dicts are immutable and shared (copying a Value copies a pointer): the
// templates run as Hugging Face runs them, in Jinja's ImmutableSandboxedEnvironment, where
// nothing but a namespace's attributes can change. Strings are UTF-8; every operation that
// Python defines per character (len, slicing, indexing, iteration) works on code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::inference::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(const CallArgs&)>;

struct Value {
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kFunction
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // kString: the text. kUndefined: why it is undefined, for the error that using it raises
  // ("'foo' is undefined"). kFunction: its name.
  std::string s;
  std::shared_ptr<const List> list;  // kList, kTuple
  std::shared_ptr<const Dict> dict;  // kDict
  std::shared_ptr<Dict> ns;          // kNamespace: the one mutable kind
  std::shared_ptr<const Function> fn;

  static Value undefined(std::string why);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value real(double v);
  static Value string(std::string v);
  static Value make_list(List v);
  static Value make_tuple(List v);
  static Value make_dict(Dict v);
  static Value make_namespace(Dict v);
  static Value function(std::string name, Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat;
  }
  bool is_sequence() const { return kind == Kind::kList || kind == Kind::kTuple; }
};

// A render-time failure. `located` is false until the innermost template node that saw it adds
// its line and column (the evaluator does that as the exception passes).
struct RenderError : Error {
  explicit RenderError(const std::string& message, bool located = false)
      : Error(message), located(located) {}
  bool located;
};

// raise_exception(message) called by the template: the template refusing its input (a role
// order it does not accept, a system message it has no place for). what() is
// "chat template: " + message; `message` is the template's own text.
struct TemplateRaised : Error {
  explicit TemplateRaised(const std::string& message)
      : Error("chat template: " + message), message(message) {}
  std::string message;
};

[[noreturn]] void fail(const std::string& message);

// Python's names of the types, for messages: str, int, list, dict, NoneType, ...
std::string type_name(const Value& v);
// Python's bool(v); Undefined is false.
bool truthy(const Value& v);
// Python's str(v) as Jinja prints it ({{ v }}); Undefined prints as "".
std::string to_str(const Value& v);
// Python's repr(v) (strings quoted and escaped as Python does).
std::string repr(const Value& v);
// Python's repr of a float: the shortest text that reads back to the same double.
std::string format_float(double d);
// Python's ==: numbers across bool/int/float, sequences and dicts element by element; a list
// never equals a tuple; two Undefined are equal (Jinja's Undefined.__eq__).
bool equals(const Value& a, const Value& b);
// The value under `key`, nullptr when absent.
const Value* find_key(const Dict& d, std::string_view key);

// A JSON document as values, objects in the document's key order: nlohmann::json sorts keys,
// nlohmann::ordered_json keeps them as written (what a template's tojson or items() shows).
// Throws Error for an unsigned integer beyond int64.
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

// Python's json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Hugging Face's tojson
// filter calls it. `indent` < 0 (and an empty `indent_text`) is None. Undefined, functions and
// namespaces are not serializable: RenderError.
struct JsonStyle {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent_text;  // one level's indentation when indent_set
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

// UTF-8 <-> code points. Invalid bytes decode as U+FFFD (inputs come from JSON, which is valid).
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);

}  // namespace tessera::inference::jinja
