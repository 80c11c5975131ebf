#include "engine/tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "engine/error.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

constexpr int32_t kMaxTokenId = 1 << 24;

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

// Min-heap on (rank, pos): lowest rank first, leftmost on ties (HF's Merge ordering).
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

BpeModel::BpeModel(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int32_t limit = 0;
  for (const auto& [token, id] : vocab_) {
    if (id < 0 || id >= kMaxTokenId) {
      throw Error(ErrorCode::kInvalidArgument, "BPE vocab id " + std::to_string(id) +
                                                   " of token '" + token + "' is out of range");
    }
    limit = std::max(limit, id + 1);
  }
  vocab_r_.resize(limit);
  present_.assign(limit, false);
  for (const auto& [token, id] : vocab_) {
    vocab_r_[id] = token;
    present_[id] = true;
  }
  const size_t prefix_len =
      options_.continuing_subword_prefix ? options_.continuing_subword_prefix->size() : 0;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Named references, not a structured binding: lambdas capture those only from clang 16
    // (the fuzz and sanitizer builds use Debian 12's clang 14).
    const std::string& a = merges[rank].first;
    const std::string& b = merges[rank].second;
    auto lookup = [&](const std::string& token) {
      auto it = vocab_.find(token);
      if (it == vocab_.end()) {
        throw Error(ErrorCode::kInvalidArgument, "BPE merge '" + a + " " + b +
                                                     "' refers to token '" + token +
                                                     "' that is not in the vocab");
      }
      return it->second;
    };
    // As HF: the merged token drops the right part's continuing-subword prefix.
    const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    const int32_t a_id = lookup(a);  // in order, so the error names the first missing token
    const int32_t b_id = lookup(b);
    const int32_t merged_id = lookup(merged);
    merges_[pair_key(a_id, b_id)] = Merge{static_cast<int32_t>(rank), merged_id};
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto id = token_to_id(name);
    byte_ids_[b] = id ? *id : -1;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !present_[id]) return nullptr;
  return &vocab_r_[id];
}

bool BpeModel::add_byte_fallback(std::string_view symbol, std::vector<Symbol>& symbols) const {
  for (char c : symbol) {
    if (byte_ids_[static_cast<uint8_t>(c)] < 0) return false;
  }
  for (char c : symbol) {
    const auto idx = static_cast<int32_t>(symbols.size());
    if (idx > 0) symbols.back().next = idx;
    symbols.push_back({byte_ids_[static_cast<uint8_t>(c)], idx - 1, -1, 1});
  }
  return true;
}

// One symbol per character (with the continuing-subword prefix / end-of-word suffix), unknown
// characters becoming byte-fallback tokens, the unk token (fused runs when fuse_unk) or nothing.
std::vector<BpeModel::Symbol> BpeModel::initial_symbols(std::string_view word) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, uint32_t len) {
    const auto idx = static_cast<int32_t>(symbols.size());
    if (idx > 0) symbols.back().next = idx;
    symbols.push_back({id, idx - 1, -1, len});
  };
  // Pending unknown run: id and byte length (unk_len 0: none).
  int32_t unk_id_pending = -1;
  uint32_t unk_len = 0;
  const bool affixes = options_.continuing_subword_prefix || options_.end_of_word_suffix;
  std::string scratch;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    utf8::next(word, pos);
    const auto len = static_cast<uint32_t>(pos - start);
    std::string_view symbol = word.substr(start, len);
    if (affixes) {
      scratch.clear();
      if (start != 0 && options_.continuing_subword_prefix)
        scratch += *options_.continuing_subword_prefix;
      scratch += symbol;
      if (pos == word.size() && options_.end_of_word_suffix)
        scratch += *options_.end_of_word_suffix;
      symbol = scratch;
    }
    if (auto it = vocab_.find(symbol); it != vocab_.end()) {
      if (unk_len != 0) add(unk_id_pending, unk_len);
      unk_len = 0;
      add(it->second, len);
      continue;
    }
    // HF leaves a pending unk in place when byte fallback succeeds; so do we.
    if (options_.byte_fallback && add_byte_fallback(symbol, symbols)) continue;
    if (!options_.unk_token) continue;  // unknown character silently dropped, as HF does
    auto unk_id = token_to_id(*options_.unk_token);
    if (!unk_id) {
      throw Error(ErrorCode::kInvalidArgument,
                  "BPE unk_token '" + *options_.unk_token + "' is not in the vocab");
    }
    if (unk_len != 0 && options_.fuse_unk) {
      unk_len += len;
    } else {
      if (unk_len != 0) add(unk_id_pending, unk_len);
      unk_id_pending = *unk_id;
      unk_len = len;
    }
  }
  if (unk_len != 0) add(unk_id_pending, unk_len);
  return symbols;
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  auto push_pair = [&](int32_t pos) {
    const Symbol& left = symbols[pos];
    if (left.next < 0) return;
    auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    // Skip stale entries: the pair at this position must still merge into the same token.
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    symbols[left.next].len = 0;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<Symbol> symbols = initial_symbols(word);
  merge_all(symbols);
  const size_t first = out.size();
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
    }
  }
}

}  // namespace rill
