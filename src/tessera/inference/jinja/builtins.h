// What a template can call: filters (x | f, in filters.cc), tests (x is t), the methods of str
// and dict values, and the global functions Jinja and Hugging Face give templates (builtins.cc).
// Each follows the Python it stands for (Jinja 3.1's filters, Python's str methods); the
// differences are listed in docs/inference.md. Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

// Whether a filter or test of that name exists (the parser refuses the others).
bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// RenderError on bad arguments, naming the filter or test.
Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);

// Jinja's getattr (obj.name): a dict's key or one of its methods, a str method, a namespace's
// attribute; Undefined (saying why) when there is none. RenderError when obj is Undefined.
Value get_attribute(const Value& obj, const std::string& name);

// The global of that name (range, dict, namespace, raise_exception, strftime_now), or Undefined.
Value global(const std::string& name);

}  // namespace tessera::inference::jinja
