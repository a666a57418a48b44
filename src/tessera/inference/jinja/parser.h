// Jinja2's grammar, the subset chat templates use, read into the tree of ast.h:
//   statements: for (with tuple targets, an inline `if` filter, else), if/elif/else,
//     set (a name, a tuple of names, a namespace attribute, or a block {% set x %}..{% endset %}),
//     macro (positional, keyword and default arguments), break/continue (Hugging Face enables
//     jinja2.ext.loopcontrols), and Hugging Face's {% generation %}..{% endgeneration %}
//     (rendered in place);
//   expressions, with Jinja's precedence: a if b else c; or; and; not; comparisons (chained,
//     in, not in); + -; ~; * / // %; **; unary - +; filters | f(args) and tests `is [not] t`;
//     calls, attributes, subscripts and slices; literals (strings, numbers, true/false/none in
//     either case, lists, tuples, dicts).
// Everything else — call and filter blocks, include/import/extends/block, with, raw,
// *args/**kwargs, and any filter or test the interpreter does not have — is refused here with
// an Error naming it and where it is, never skipped.
#pragma once

#include <vector>

#include "tessera/inference/jinja/ast.h"
#include "tessera/inference/jinja/lexer.h"

namespace tessera::inference::jinja {

// Throws Error "chat template line L column C: ..." on a syntax error or unsupported construct.
Body parse(const std::vector<Token>& tokens);

}  // namespace tessera::inference::jinja
