// Jinja parser: tokens -> syntax tree. Supports the statements chat templates use (for with
// else / loop filter / tuple targets, if/elif/else, set incl. namespace attributes and block
// set, macro, break/continue, generation, filter blocks) and jinja2's expression grammar and
// precedence. Anything else fails with a TemplateError naming the line.
#pragma once

#include <string>

#include "engine/chat/jinja_ast.h"

namespace rill::jinja {

/// Parses a whole template. Throws TemplateError with the line of the offending token.
NodeList parse_template(const std::string& source);

}  // namespace rill::jinja
