// Prompt and output lengths drawn from a small family of distributions, given on the command line
// as a mean (`--input-len 256`) and a spec (`--input-len-dist uniform:0.5`).
#pragma once

#include <random>
#include <string>

namespace rill::loadtest {

/// A distribution of token counts around `mean`, always within [1, max(1, 2 * mean)] except
/// for `fixed`, which is exactly `mean`.
struct LengthDist {
  enum class Kind {
    kFixed,    // "fixed": always mean
    kUniform,  // "uniform:R": uniform integers in [mean * (1 - R), mean * (1 + R)], R in [0, 1]
    kNormal,   // "normal:R": normal with standard deviation R * mean, rounded and clamped
  };
  Kind kind = Kind::kFixed;
  int mean = 1;
  double ratio = 0;  // R of the spec

  /// One length.
  int sample(std::mt19937_64& rng) const;
};

/// Parses "fixed", "uniform:R" or "normal:R" for the given mean; throws std::invalid_argument
/// with a message naming the spec when it is not one of those or R is out of range.
LengthDist parse_length_dist(int mean, const std::string& spec);

}  // namespace rill::loadtest
