// The BPE model of Hugging Face tokenizers (its `models::bpe`): vocab + ranked merges, applied to
// one pre-token ("word") at a time with the exact semantics of HF's Word::merge_all: the
// lowest-rank mergeable adjacent pair is merged first, leftmost on ties, via a priority
// queue over a linked list of symbols (O(n log n), so SentencePiece-style tokenizers that run
// BPE over a whole prompt stay fast).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rill {

/// Hash for heterogeneous (std::string_view) lookups in string-keyed unordered maps.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  /// Throws rill::Error when a merge names a token (or a merged token) missing from the vocab.
  BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options);

  /// Appends the ids of `word` to out.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// nullptr when no vocab entry has this id.
  const std::string* id_to_token(int32_t id) const;
  /// One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(vocab_r_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word covered; 0 marks a symbol merged into its left neighbour
  };

  std::vector<Symbol> initial_symbols(std::string_view word) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  bool add_byte_fallback(std::string_view symbol, std::vector<Symbol>& symbols) const;

  TokenMap vocab_;
  std::vector<std::string> vocab_r_;
  std::vector<bool> present_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> ids, -1 when missing
  BpeOptions options_;

  // Per-word results, for pipelines that pre-tokenize into words (byte-level BPE).
  static constexpr size_t kCacheMaxWordBytes = 256;
  static constexpr size_t kCacheCapacity = 20000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace rill
