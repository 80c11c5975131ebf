// Added tokens (tokenizer.json "added_tokens"): matched in the input before the normalizer
// runs (normalized=false tokens, on the raw text) and after it (normalized=true tokens, on
// the normalized text, with their content normalized the same way), like HF's
// AddedVocabulary::extract_and_normalize. Matching is leftmost-longest; single_word, lstrip
// and rstrip are honoured as HF does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/tokenizer/bpe.h"

namespace rill {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

/// A piece of input: either an added token (id >= 0) or text for the normal pipeline.
struct Segment {
  std::string_view text;
  int32_t id = -1;
  size_t offset = 0;  // byte offset of `text` in the string that was split
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  /// `normalizer` (may be null) normalizes the content of normalized=true tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  /// Splits `text` on the normalized=false (normalized_set false) or normalized=true tokens.
  std::vector<Segment> split(std::string_view text, bool normalized_set) const;

  const AddedToken* find_by_id(int32_t id) const;
  std::optional<int32_t> find_by_content(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the patterns of one set, for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, int32_t> next;
      int32_t token = -1;  // index into tokens_ when a pattern ends here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at text[pos]: its length, or 0.
    size_t longest(std::string_view text, size_t pos, int32_t* token) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  TokenMap by_content_;
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace rill
