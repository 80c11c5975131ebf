#include "engine/tokenizer/added_vocab.h"

#include <algorithm>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

// HF uses the Rust regexes \w$, ^\w, \s*$ and ^\s* here.
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  return unicode::has_property(utf8::peek(s, utf8::prev_boundary(s, s.size())), unicode::kWord);
}

bool starts_with_word(std::string_view s) {
  return !s.empty() && unicode::has_property(utf8::peek(s, 0), unicode::kWord);
}

size_t leftmost_space_at_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t prev = utf8::prev_boundary(s, end);
    if (!unicode::is_white_space(utf8::peek(s, prev))) break;
    end = prev;
  }
  return end;
}

size_t rightmost_space_at_start(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!unicode::is_white_space(utf8::next(s, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty()) return;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
  int32_t node = 0;
  for (char c : pattern) {
    const auto b = static_cast<unsigned char>(c);
    auto it = nodes[node].next.find(b);
    if (it == nodes[node].next.end()) {
      nodes.emplace_back();
      const auto child = static_cast<int32_t>(nodes.size()) - 1;
      nodes[node].next.emplace(b, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // first definition wins
}

size_t AddedVocabulary::Trie::longest(std::string_view text, size_t pos, int32_t* token) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = nodes[node].next.find(static_cast<unsigned char>(text[i]));
    if (it == nodes[node].next.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = i + 1 - pos;
      *token = nodes[node].token;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_[t.id] = i;
    by_content_.emplace(t.content, t.id);
    if (t.special) special_contents_.insert(t.content);
    if (t.normalized && normalizer != nullptr) {
      normalized_trie_.insert(normalizer->normalize(t.content), static_cast<int32_t>(i));
    } else if (t.normalized) {
      normalized_trie_.insert(t.content, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized_set) const {
  const Trie& trie = normalized_set ? normalized_trie_ : raw_trie_;
  std::vector<Segment> out;
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t index = -1;
    const size_t len = trie.first_byte[static_cast<unsigned char>(text[pos])]
                           ? trie.longest(text, pos, &index)
                           : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;  // the match is consumed even when single_word rejects it (aho-corasick)
    if (t.single_word) {
      const bool space_before = start == 0 || !ends_with_word(text.substr(0, start));
      const bool space_after = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) start = std::max(leftmost_space_at_end(text.substr(0, start)), start_offset);
    if (t.rstrip) stop += rightmost_space_at_start(text.substr(stop));
    if (start_offset < start) {
      out.push_back({text.substr(start_offset, start - start_offset), -1, start_offset});
    }
    out.push_back({text.substr(start, stop - start), t.id, start});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) {
    out.push_back({text.substr(start_offset), -1, start_offset});
  }
  return out;
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find_by_content(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  return special_contents_.find(content) != special_contents_.end();
}

}  // namespace rill
