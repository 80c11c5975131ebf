// Jinja statement parser: tokens -> syntax tree. Supports the statements chat templates use:
// for (with else, loop filter, tuple targets, recursive), if/elif/else, set (names, namespace
// attributes, tuples, blocks with filters), macro, call blocks, with, break/continue,
// generation, filter blocks; {% raw %} is handled by the lexer. Anything else fails with a
// TemplateError naming the line.
#pragma once

#include <string>

#include "engine/chat/jinja_ast.h"

namespace rill::jinja {

/// Parses a whole template. Throws TemplateError with the line of the offending token.
NodeList parse_template(const std::string& source);

}  // namespace rill::jinja
