// GBNF grammars (llama.cpp's syntax, docs/structured_outputs.md) -> the grammar IR.
//
//   root   ::= "{" ws item ("," ws item)* "}"    # comments run to the end of the line
//   item   ::= [a-z]+ | "\"" [^"\\]* "\"" | ( "x" | "y" ){2,4} | digit? | .
//
// Terminals: "literals" and [classes] / [^negated] over Unicode code points (UTF-8), with
// escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH; `.` is any character. Operators:
// grouping ( ), alternation |, repetition * + ? {m} {m,} {m,n}. A rule ends at a newline
// outside parentheses, except after `::=` or `|`, or when the next line starts with `|`.
// `root` is the start rule. Parsing uses an explicit stack; undefined rules, unbalanced
// brackets and bad escapes are errors naming the line and column.
#pragma once

#include <string_view>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

/// Parses GBNF text into `g` (its rules; g.root set to "root"). Throws rill::Error
/// (kInvalidArgument) "grammar: line L, column C: <problem>".
void parse_gbnf(Grammar& g, std::string_view text, const GrammarLimits& limits);

}  // namespace rill::grammar
