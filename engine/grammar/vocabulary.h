// The model's vocabulary as the grammar engine sees it: each token id's bytes (decoded once:
// GPT-2 byte-level characters mapped back to bytes, SentencePiece's U+2581 to a space, <0xXX>
// byte tokens to their byte), which ids are special (never allowed by a constraint, except
// EOS where the grammar may end), and the non-special tokens sorted by their bytes with the
// common-prefix lengths of neighbours: a vocabulary trie walked in order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"

namespace rill {
class Tokenizer;
}

namespace rill::grammar {

class Vocabulary {
 public:
  /// `size`: the model's vocabulary (logits width; ids past the tokenizer's are special);
  /// `eos_ids`: the tokens that end generation.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tok, int32_t size,
                                                          std::vector<int32_t> eos_ids);
  /// Explicit tokens (tests): special[i] != 0 marks a special token.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<uint8_t> special,
             std::vector<int32_t> eos_ids);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  /// Mask words per row: ceil(size / 32).
  size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool special(int32_t id) const { return special_[static_cast<size_t>(id)] != 0; }
  bool is_eos(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_; }

  /// Non-special tokens with at least one byte, sorted by bytes (ties by id).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  /// lcp()[i]: common prefix length of sorted()[i-1] and sorted()[i] (0 for i == 0).
  const std::vector<uint32_t>& lcp() const { return lcp_; }
  /// The sorted tokens as a trie: node 0 is the root (depth 0); a node's tokens are the
  /// sorted() indices [lo, hi), of which [lo, lo + ends) end at the node.
  struct TrieNode {
    uint32_t lo = 0, hi = 0, ends = 0;
    uint32_t first_child = 0, next_sibling = 0;  // 0: none
    uint8_t byte = 0;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  /// Longest token, in bytes.
  size_t max_token_bytes() const { return max_len_; }
  /// The bytes found at offset d or later of some walkable token (sorted()), for d in
  /// [0, max_token_bytes()] (empty at max_token_bytes()): a walk of the trie takes no other
  /// byte d bytes deep. Shrinks with d; with long runs of one character (Llama-3), past the
  /// longest word only the runs' characters remain.
  const ByteSet& bytes_from(size_t d) const { return from_sets_[from_level_[d]]; }
  /// bytes_from(d)'s index among its distinct sets: equal indices, equal sets.
  uint32_t bytes_from_level(size_t d) const { return from_level_[d]; }
  /// Identity of the vocabulary for caches (hash of every token's bytes and flags).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_;
  std::vector<int32_t> eos_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  std::vector<TrieNode> trie_;
  size_t max_len_ = 0;
  std::vector<ByteSet> from_sets_;     // distinct bytes_from() sets
  std::vector<uint32_t> from_level_;  // [max_len_ + 1]: per offset, its set in from_sets_
  uint64_t fingerprint_ = 0;
};

}  // namespace rill::grammar
