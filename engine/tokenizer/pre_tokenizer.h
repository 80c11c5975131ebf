// Pre-tokenizers of Hugging Face tokenizers (pre_tokenizers/*): split normalized text into
// the pieces ("words") that the model encodes one by one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tokenizer/regex.h"

namespace rill {

/// One piece of pre-tokenized text. `at_start` is true when the piece begins at offset 0 of
/// the original input (Metaspace's prepend_scheme "first" prepends only there).
struct PreToken {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Replaces `pieces` by their split (and possibly rewritten) parts; empty parts are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

/// What the matches of a Split pattern become (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/// Where a pattern matches: sorted, non-overlapping [begin, end) byte ranges.
class SplitPattern {
 public:
  virtual ~SplitPattern() = default;
  virtual std::vector<std::pair<size_t, size_t>> find(std::string_view text) const = 0;
};

std::unique_ptr<SplitPattern> make_regex_pattern(std::unique_ptr<Regex> regex);
std::unique_ptr<SplitPattern> make_literal_pattern(std::string literal);
/// Every code point satisfying `pred` is a match of its own (HF's `Fn(char) -> bool` pattern).
std::unique_ptr<SplitPattern> make_char_pattern(std::function<bool(char32_t)> pred);

/// Splits each piece on a pattern: HF's Split, and the base of Digits, Punctuation,
/// Whitespace, WhitespaceSplit and CharDelimiterSplit.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<SplitPattern> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override;

 private:
  std::unique_ptr<SplitPattern> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

/// GPT-2 byte-level: optional prefix space, optional GPT-2 regex split, then every byte
/// replaced by its printable stand-in character.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(std::vector<PreToken>& pieces) const override;

 private:
  bool add_prefix_space_;
  bool use_regex_;
};

enum class PrependScheme { kAlways, kNever, kFirst };

/// SentencePiece-style: spaces become `replacement`, which is prepended per the scheme and
/// (when `split`) starts each piece.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override;

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

/// The GPT-2 pre-tokenization pattern used by ByteLevel(use_regex = true).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Splits `piece` on `matches` per `behavior` (HF NormalizedString::split), appending the
/// non-empty parts to out.
void split_piece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<PreToken>& out);

}  // namespace rill
