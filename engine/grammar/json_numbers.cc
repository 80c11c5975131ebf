#include "engine/grammar/json_numbers.h"

#include <string>
#include <utility>
#include <vector>

namespace rill::grammar {

namespace {

int32_t digits(Grammar& g, char lo, char hi) {
  return g.byte_set(ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// [x, y], both non-negative with the same number of digits.
void same_length(Grammar& g, const std::string& x0, const std::string& y0,
                 std::vector<int32_t>& alts) {
  std::vector<std::pair<std::string, std::string>> work{{x0, y0}};
  while (!work.empty()) {
    auto [x, y] = work.back();
    work.pop_back();
    size_t i = 0;
    while (i < x.size() && x[i] == y[i]) ++i;
    std::vector<int32_t> seq;
    if (i > 0) seq.push_back(g.literal(x.substr(0, i)));
    if (i == x.size()) {
      alts.push_back(g.seq(std::move(seq)));
      continue;
    }
    const size_t rest = x.size() - i - 1;
    const bool x_low = x.find_first_not_of('0', i + 1) == std::string::npos;
    const bool y_high = y.find_first_not_of('9', i + 1) == std::string::npos;
    if (x_low && y_high) {
      seq.push_back(digits(g, x[i], y[i]));
      if (rest > 0)
        seq.push_back(
            g.repeat(digits(g, '0', '9'), static_cast<int32_t>(rest), static_cast<int32_t>(rest)));
      alts.push_back(g.seq(std::move(seq)));
      continue;
    }
    char lo_full = x[i], hi_full = y[i];
    if (!x_low) {
      work.emplace_back(x, x.substr(0, i + 1) + std::string(rest, '9'));
      ++lo_full;
    }
    if (!y_high) {
      work.emplace_back(y.substr(0, i + 1) + std::string(rest, '0'), y);
      --hi_full;
    }
    if (lo_full <= hi_full)
      work.emplace_back(x.substr(0, i) + lo_full + std::string(rest, '0'),
                        x.substr(0, i) + hi_full + std::string(rest, '9'));
  }
}

// Non-negative [a, b]; b absent: unbounded (up to kMaxJsonDigits digits).
void non_negative(Grammar& g, uint64_t a, std::optional<uint64_t> b, std::vector<int32_t>& alts) {
  const std::string sa = std::to_string(a);
  const size_t max_len = b ? std::to_string(*b).size() : static_cast<size_t>(kMaxJsonDigits);
  for (size_t len = sa.size(); len <= max_len; ++len) {
    std::string lo = len == sa.size() ? sa : (len == 1 ? "0" : "1" + std::string(len - 1, '0'));
    std::string hi;
    if (b && len == max_len) {
      hi = std::to_string(*b);
    } else if (!b && len > 19) {
      // Past uint64: any len-digit number without a leading zero.
      alts.push_back(
          g.seq({digits(g, '1', '9'), g.repeat(digits(g, '0', '9'), static_cast<int32_t>(len - 1),
                                               static_cast<int32_t>(len - 1))}));
      continue;
    } else {
      hi = std::string(len, '9');
    }
    if (lo.size() == hi.size() && lo <= hi) same_length(g, lo, hi, alts);
  }
}

}  // namespace

int32_t integer_range(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<int32_t> alts;
  // Negative part: -(magnitudes in [max(1, -hi), -lo]).
  if (!lo || *lo < 0) {
    const uint64_t mag_lo = (!hi || *hi >= 0) ? 1 : static_cast<uint64_t>(-(*hi + 1)) + 1;
    std::optional<uint64_t> mag_hi;
    if (lo) mag_hi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    std::vector<int32_t> neg;
    if (!mag_hi || mag_lo <= *mag_hi) non_negative(g, mag_lo, mag_hi, neg);
    if (!neg.empty()) alts.push_back(g.seq({g.literal("-"), g.choice(std::move(neg))}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t a = (!lo || *lo < 0) ? 0 : static_cast<uint64_t>(*lo);
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    if (!b || a <= *b) non_negative(g, a, b, alts);
  }
  return g.choice(std::move(alts));
}

}  // namespace rill::grammar
