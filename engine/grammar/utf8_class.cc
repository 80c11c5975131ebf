#include "engine/grammar/utf8_class.h"

#include <algorithm>

#include "engine/util/utf8.h"

namespace rill::grammar {

CodeRanges normalize(CodeRanges ranges) {
  CodeRanges cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    // Remove the surrogate block.
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
    } else {
      cut.emplace_back(lo, hi);
    }
  }
  std::sort(cut.begin(), cut.end());
  CodeRanges out;
  for (auto r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CodeRanges complement(const CodeRanges& ranges) {
  CodeRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize(std::move(out));
}

namespace {

int utf8_len(uint32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// Emits byte-range sequences for [lo, hi], both of encoded length n.
void split_same_length(Grammar& g, uint32_t lo, uint32_t hi, int n, std::vector<int32_t>& alts) {
  std::vector<std::pair<uint32_t, uint32_t>> stack{{lo, hi}};
  while (!stack.empty()) {
    auto [a, b] = stack.back();
    stack.pop_back();
    bool split = false;
    for (int i = 1; i < n && !split; ++i) {
      const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
      if ((a & ~m) != (b & ~m)) {
        if ((a & m) != 0) {
          stack.emplace_back((a | m) + 1, b);
          stack.emplace_back(a, a | m);
          split = true;
        } else if ((b & m) != m) {
          stack.emplace_back(b & ~m, b);
          stack.emplace_back(a, (b & ~m) - 1);
          split = true;
        }
      }
    }
    if (split) continue;
    std::string ea, eb;
    utf8::append(ea, a);
    utf8::append(eb, b);
    std::vector<int32_t> seq;
    for (int i = 0; i < n; ++i)
      seq.push_back(g.byte_set(ByteSet::range(static_cast<uint8_t>(ea[static_cast<size_t>(i)]),
                                              static_cast<uint8_t>(eb[static_cast<size_t>(i)]))));
    alts.push_back(g.seq(std::move(seq)));
  }
}

}  // namespace

int32_t utf8_class(Grammar& g, const CodeRanges& ranges) {
  ByteSet ascii;
  std::vector<int32_t> alts;
  static constexpr uint32_t kEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (auto [lo, hi] : ranges) {
    while (lo <= hi) {
      const int n = utf8_len(lo);
      const uint32_t end = std::min(hi, kEnds[n - 1]);
      if (n == 1) {
        for (uint32_t c = lo; c <= end; ++c) ascii.set(static_cast<uint8_t>(c));
      } else {
        split_same_length(g, lo, end, n, alts);
      }
      lo = end + 1;
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), g.byte_set(ascii));
  return g.choice(std::move(alts));
}

}  // namespace rill::grammar

namespace rill::grammar {

int32_t json_string_class(Grammar& g, const CodeRanges& ranges) {
  CodeRanges plain;
  std::vector<int32_t> escapes;
  static const char* kHex = "0123456789abcdef";
  auto escape_of = [](uint32_t c) -> std::string {
    switch (c) {
      case '"':
        return "\\\"";
      case '\\':
        return "\\\\";
      case '\n':
        return "\\n";
      case '\t':
        return "\\t";
      case '\r':
        return "\\r";
      case '\b':
        return "\\b";
      case '\f':
        return "\\f";
      default:
        break;
    }
    return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
  };
  for (auto [lo, hi] : ranges) {
    uint32_t c = lo;
    for (; c <= hi && (c < 0x20 || c == '"' || c == '\\'); ++c)
      escapes.push_back(g.literal(escape_of(c)));
    // Split the rest around '"' (0x22) and '\' (0x5C).
    while (c <= hi) {
      uint32_t end = hi;
      if (c < '"' && end >= '"')
        end = '"' - 1;
      else if (c < '\\' && end >= '\\')
        end = '\\' - 1;
      if (c <= end) plain.emplace_back(c, end);
      c = end + 1;
      if (c <= hi && (c == '"' || c == '\\')) {
        escapes.push_back(g.literal(escape_of(c)));
        ++c;
      }
    }
  }
  std::vector<int32_t> alts;
  if (!plain.empty()) alts.push_back(utf8_class(g, plain));
  for (int32_t e : escapes) alts.push_back(e);
  return g.choice(std::move(alts));
}

}  // namespace rill::grammar
