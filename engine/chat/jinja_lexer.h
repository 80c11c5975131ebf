// Jinja lexer: splits a template into text and tag tokens, applying whitespace control the way
// transformers configures jinja2: trim_blocks=True (the first newline after a block or comment
// tag is dropped), lstrip_blocks=True (spaces and tabs before a block or comment tag at the
// start of a line are dropped), `-` on a tag strips all whitespace on that side, `+` disables
// lstrip/trim; newlines are normalized to \n and one trailing newline of the template dropped
// (keep_trailing_newline=False).
#pragma once

#include <string>
#include <vector>

namespace rill::jinja {

enum class TokenKind {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOp,          // operators and punctuation, text holds it: "==", "(", "|", ...
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line;  // 1-based line of the token's start in the template
};

/// Throws TemplateError (with the line) on an unterminated tag or string, or a stray character.
std::vector<Token> tokenize(const std::string& source);

}  // namespace rill::jinja
