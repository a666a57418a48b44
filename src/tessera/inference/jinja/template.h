// A parsed Jinja2 template (the subset of parser.h) and its renderer, configured as Hugging Face
// renders chat templates: trim_blocks and lstrip_blocks on, no autoescaping, the immutable
// sandbox (only namespace attributes can be assigned), Jinja's default Undefined, and
// jinja2.ext.loopcontrols.
//
// Scoping follows Jinja: a for loop's body is a new scope each iteration (a `set` inside does
// not outlive the iteration; namespace() objects carry values out), if blocks are not scopes.
//
// Thread-safety: a Template is immutable after construction; render() may run on many threads.
#pragma once

#include <string>
#include <string_view>

#include "tessera/inference/jinja/ast.h"
#include "tessera/inference/jinja/value.h"

namespace tessera::inference::jinja {

class Template {
 public:
  // Throws Error "chat template line L column C: ..." for a syntax error or anything outside
  // the supported subset.
  explicit Template(std::string_view source);

  // Renders with the variables of `context` (a dict). Throws TemplateRaised when the template
  // calls raise_exception, Error "chat template line L column C: ..." for any other failure
  // (an undefined value used, a type error, a bad filter argument).
  std::string render(const Value& context) const;

 private:
  Body body_;
};

}  // namespace tessera::inference::jinja
