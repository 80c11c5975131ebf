#include "engine/grammar/vocabulary.h"

#include <algorithm>
#include <optional>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/utf8.h"

namespace rill::grammar {

namespace {

// Bytes of a GPT-2 byte-level token string; nullopt when some character is not a byte char.
std::optional<std::string> byte_level_bytes(const std::string& token) {
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const std::optional<char32_t> cp = utf8::decode(token, i);
    if (!cp) return std::nullopt;
    const int b = byte_level::char_to_byte(*cp);
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

std::string sentencepiece_bytes(const std::string& token) {
  const int b = parse_byte_token(token);
  if (b >= 0) return std::string(1, static_cast<char>(b));
  std::string out;
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tok, int32_t size,
                                                             std::vector<int32_t> eos_ids) {
  // GPT-2 byte-level vocabularies hold the characters standing for ' ' and '\n'.
  const bool byte_level =
      tok.token_to_id("\xC4\xA0").has_value() && tok.token_to_id("\xC4\x8A").has_value();
  const int32_t n = std::max(size, 0);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<uint8_t> special(static_cast<size_t>(n), 1);
  for (int32_t id = 0; id < std::min(n, tok.vocab_size()); ++id) {
    if (tok.is_special(id)) continue;
    std::string piece;
    try {
      piece = tok.id_to_token(id);
    } catch (const std::exception&) {
      continue;  // a hole in the id space
    }
    std::optional<std::string> b;
    if (byte_level) b = byte_level_bytes(piece);
    bytes[static_cast<size_t>(id)] = b ? *b : sentencepiece_bytes(piece);
    special[static_cast<size_t>(id)] = 0;
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                            std::move(eos_ids));
}

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<uint8_t> special,
                       std::vector<int32_t> eos_ids)
    : bytes_(std::move(token_bytes)), special_(std::move(special)), eos_(std::move(eos_ids)) {
  special_.resize(bytes_.size(), 0);
  std::erase_if(eos_, [&](int32_t id) { return id < 0 || id >= size(); });
  for (int32_t e : eos_) special_[static_cast<size_t>(e)] = 1;  // allowed only as EOS
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!special_[i] && !bytes_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  std::stable_sort(sorted_.begin(), sorted_.end(),
                   [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes(sorted_[i - 1]);
    const std::string& b = bytes(sorted_[i]);
    uint32_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[i] = k;
  }
  // Trie over the sorted tokens: a stack of the open nodes along the current token.
  trie_.push_back(TrieNode{0, static_cast<uint32_t>(sorted_.size()), 0, 0, 0, 0});
  std::vector<uint32_t> path{0};
  std::vector<uint32_t> last_child{0};  // per open node: its last child so far
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const std::string& t = bytes(sorted_[i]);
    max_len_ = std::max(max_len_, t.size());
    const size_t keep = std::min<size_t>(i == 0 ? 0 : lcp_[i], t.size());
    while (path.size() > keep + 1) {
      trie_[path.back()].hi = static_cast<uint32_t>(i);
      path.pop_back();
      last_child.pop_back();
    }
    for (size_t d = path.size() - 1; d < t.size(); ++d) {
      TrieNode n;
      n.lo = static_cast<uint32_t>(i);
      n.byte = static_cast<uint8_t>(t[d]);
      const auto id = static_cast<uint32_t>(trie_.size());
      trie_.push_back(n);
      const uint32_t parent = path.back();
      if (last_child.back() == 0)
        trie_[parent].first_child = id;
      else
        trie_[last_child.back()].next_sibling = id;
      last_child.back() = id;
      path.push_back(id);
      last_child.push_back(0);
    }
    ++trie_[path.back()].ends;
  }
  while (path.size() > 1) {
    trie_[path.back()].hi = static_cast<uint32_t>(sorted_.size());
    path.pop_back();
  }
  std::vector<ByteSet> at(max_len_ + 1);  // bytes at offset d of some token
  for (int32_t id : sorted_) {
    const std::string& t = bytes(id);
    for (size_t d = 0; d < t.size(); ++d) at[d].set(static_cast<uint8_t>(t[d]));
  }
  from_level_.assign(max_len_ + 1, 0);
  ByteSet from;  // bytes at offset d or later
  for (size_t d = max_len_ + 1; d-- > 0;) {
    from |= at[d];
    if (from_sets_.empty() || !(from_sets_.back() == from)) from_sets_.push_back(from);
    from_level_[d] = static_cast<uint32_t>(from_sets_.size() - 1);
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint8_t c) { h = (h ^ c) * 1099511628211ull; };
  for (size_t i = 0; i < bytes_.size(); ++i) {
    for (char c : bytes_[i]) mix(static_cast<uint8_t>(c));
    mix(0xFF);
    mix(special_[i]);
  }
  for (int32_t e : eos_)
    for (int s = 0; s < 32; s += 8) mix(static_cast<uint8_t>(e >> s));
  fingerprint_ = h;
}

bool Vocabulary::is_eos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

}  // namespace rill::grammar
