// Regular expressions -> grammar expressions. The subset (docs/structured_outputs.md):
// literals (UTF-8), `.` (any character but \n), classes [...] / [^...] with ranges and the
// escapes \d \w \s \D \W \S (ASCII meanings, as Python's re.ASCII), \n \t \r \f \v \0 \xHH
// \uHHHH \UHHHHHHHH and escaped punctuation, groups (...) (?:...) (?P<n>...) (?<n>...),
// alternation |, quantifiers * + ? {m} {m,} {,n} {m,n} (lazy forms accepted: same language),
// and ^ / $ (\A / \Z) only at the ends. Backreferences, lookaround, word boundaries, inline
// flags and possessive quantifiers are refused with an error naming them. Parsing uses an
// explicit stack (no recursion on the pattern's nesting).
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

struct RegexOptions {
  /// Characters are emitted as inside a JSON string literal: '"' and '\' as \" and \\,
  /// control characters as their JSON escapes (JSON schema "pattern").
  bool json_string = false;
  int32_t max_repeat = 10000;
  const char* what = "regex";  // names the source in errors ("pattern", "guided_regex")
};

struct RegexResult {
  int32_t expr = -1;
  bool anchored_start = false;  // began with ^ or \A
  bool anchored_end = false;    // ended with $ or \Z
};

/// Compiles `pattern` into expressions of `g`; throws rill::Error(kInvalidArgument) naming
/// the problem and its byte offset.
RegexResult compile_regex(Grammar& g, std::string_view pattern, const RegexOptions& options);

}  // namespace rill::grammar
