#include "engine/tokenizer/pre_tokenizer.h"

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

struct Span {
  size_t begin;
  size_t end;
  bool flag;  // is_match before the behavior is applied; "remove" after
};

class RegexPattern : public SplitPattern {
 public:
  explicit RegexPattern(std::unique_ptr<Regex> regex) : regex_(std::move(regex)) {}
  std::vector<std::pair<size_t, size_t>> find(std::string_view text) const override {
    return regex_->find_all(text);
  }

 private:
  std::unique_ptr<Regex> regex_;
};

class LiteralPattern : public SplitPattern {
 public:
  explicit LiteralPattern(std::string literal) : literal_(std::move(literal)) {}
  std::vector<std::pair<size_t, size_t>> find(std::string_view text) const override {
    std::vector<std::pair<size_t, size_t>> out;
    if (literal_.empty()) return out;
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      out.emplace_back(pos, pos + literal_.size());
    }
    return out;
  }

 private:
  std::string literal_;
};

class CharPattern : public SplitPattern {
 public:
  explicit CharPattern(std::function<bool(char32_t)> pred) : pred_(std::move(pred)) {}
  std::vector<std::pair<size_t, size_t>> find(std::string_view text) const override {
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t pos = 0; pos < text.size();) {
      const size_t start = pos;
      if (pred_(utf8::next(text, pos))) out.emplace_back(start, pos);
    }
    return out;
  }

 private:
  std::function<bool(char32_t)> pred_;
};

// Matches plus the gaps between them, covering the whole text (HF Pattern::find_matches).
std::vector<Span> cover(size_t size, const std::vector<std::pair<size_t, size_t>>& matches) {
  std::vector<Span> spans;
  if (size == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b != prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) spans.push_back({prev, size, false});
  return spans;
}

// Turns is_match flags into "remove" flags, merging spans per the behavior.
std::vector<Span> apply_behavior(std::vector<Span> spans, SplitBehavior behavior) {
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      return spans;
    case SplitBehavior::kIsolated:
      for (auto& s : spans) s.flag = false;
      return spans;
    case SplitBehavior::kContiguous:
      for (const auto& s : spans) {
        if (s.flag == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      return out;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.flag && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->flag;
      }
      return {out.rbegin(), out.rend()};
  }
  return spans;
}

}  // namespace

std::unique_ptr<SplitPattern> make_regex_pattern(std::unique_ptr<Regex> regex) {
  return std::make_unique<RegexPattern>(std::move(regex));
}

std::unique_ptr<SplitPattern> make_literal_pattern(std::string literal) {
  return std::make_unique<LiteralPattern>(std::move(literal));
}

std::unique_ptr<SplitPattern> make_char_pattern(std::function<bool(char32_t)> pred) {
  return std::make_unique<CharPattern>(std::move(pred));
}

void split_piece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<PreToken>& out) {
  std::vector<Span> spans = cover(piece.text.size(), matches);
  if (invert) {
    for (auto& s : spans) s.flag = !s.flag;
  }
  for (const Span& s : apply_behavior(std::move(spans), behavior)) {
    if (s.flag || s.end == s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_start && s.begin == 0});
  }
}

void SplitPreTokenizer::pre_tokenize(std::vector<PreToken>& pieces) const {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (const PreToken& piece : pieces) {
    split_piece(piece, pattern_->find(piece.text), behavior_, invert_, out);
  }
  pieces = std::move(out);
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

void ByteLevelPreTokenizer::pre_tokenize(std::vector<PreToken>& pieces) const {
  static const Regex gpt2(kGpt2Pattern);
  std::vector<PreToken> split;
  split.reserve(pieces.size());
  for (PreToken& piece : pieces) {
    // HF's NormalizedString::prepend does nothing on empty text.
    if (add_prefix_space_ && !piece.text.empty() && piece.text[0] != ' ') {
      piece.text = " " + piece.text;  // (insert(0, ...) trips a GCC 12 -Wrestrict false positive)
    }
    if (use_regex_) {
      split_piece(piece, gpt2.find_all(piece.text), SplitBehavior::kIsolated, false, split);
    } else if (!piece.text.empty()) {
      split.push_back(std::move(piece));
    }
  }
  for (PreToken& piece : split) piece.text = byte_level::encode_bytes(piece.text);
  pieces = std::move(split);
}

void MetaspacePreTokenizer::pre_tokenize(std::vector<PreToken>& pieces) const {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (PreToken& piece : pieces) {
    piece.text = replace_all(piece.text, " ", replacement_);
    const bool starts = piece.text.compare(0, replacement_.size(), replacement_) == 0;
    const bool prepend =
        !piece.text.empty() && !starts &&
        (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start));
    if (prepend) piece.text.insert(0, replacement_);
    if (!split_) {
      if (!piece.text.empty()) out.push_back(std::move(piece));
      continue;
    }
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t pos = piece.text.find(replacement_); pos != std::string::npos;
         pos = piece.text.find(replacement_, pos + replacement_.size())) {
      matches.emplace_back(pos, pos + replacement_.size());
    }
    split_piece(piece, matches, SplitBehavior::kMergedWithNext, false, out);
  }
  pieces = std::move(out);
}

void SequencePreTokenizer::pre_tokenize(std::vector<PreToken>& pieces) const {
  for (const auto& step : steps_) step->pre_tokenize(pieces);
}

}  // namespace rill
