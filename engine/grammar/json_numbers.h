// Decimal digit patterns for bounded JSON integers: [lo, hi] as alternatives of digit classes
// (the classic numeric-range construction), without recursion.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

/// Most digits of an unbounded integer part (and of a fraction).
inline constexpr int32_t kMaxJsonDigits = 20;

/// An expression matching the canonical decimal form of every integer in [lo, hi] (either
/// bound may be absent: unbounded, up to kMaxJsonDigits digits).
int32_t integer_range(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace rill::grammar
