// Character classes over Unicode code points, lowered to byte-level alternatives of UTF-8
// sequences (the construction RE2 and Rust's utf8-ranges use): [0x80-0x7FF] becomes
// [\xC2-\xDF][\x80-\xBF], and so on. Surrogates (U+D800..U+DFFF) are never produced.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

/// Inclusive code point ranges.
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;

/// Sorted, merged, surrogates removed.
CodeRanges normalize(CodeRanges ranges);
/// Everything in [0, kMaxCodePoint] not in `ranges` (which must be normalized).
CodeRanges complement(const CodeRanges& ranges);
/// An expression matching exactly one code point of `ranges` (UTF-8 encoded); an empty class
/// matches nothing.
int32_t utf8_class(Grammar& g, const CodeRanges& ranges);
/// One character of `ranges` as it appears inside a JSON string literal: '"' and '\' as
/// \" and \\, control characters (< U+0020) as their escapes (\n, \u0001), the rest as UTF-8.
int32_t json_string_class(Grammar& g, const CodeRanges& ranges);

}  // namespace rill::grammar
