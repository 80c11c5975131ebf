#include "engine/tokenizer/llama2c.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <queue>
#include <sstream>

#include "engine/error.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

constexpr int32_t kBos = 1;
// run.c's initial best score: pairs whose merged score is not above it are never merged.
constexpr float kNoScore = -1e10f;

template <typename T>
bool read_pod(std::string_view bytes, size_t& pos, T* out) {
  if (bytes.size() - pos < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// sscanf(piece, "<0x%02hhX>", &byte) == 1: "<0x" then one or two hex digits.
int parse_raw_byte(std::string_view piece) {
  if (piece.size() < 4 || piece.substr(0, 3) != "<0x") return -1;
  int value = hex_digit(piece[3]);
  if (value < 0) return -1;
  if (piece.size() > 4 && hex_digit(piece[4]) >= 0) value = value * 16 + hex_digit(piece[4]);
  return value;
}

struct PairCandidate {
  float score;
  int32_t pos;
  int32_t left;
  int32_t right;
  int32_t merged;
};

// Highest score first, leftmost on ties (run.c scans left to right and keeps a strict max).
struct PairAfter {
  bool operator()(const PairCandidate& a, const PairCandidate& b) const {
    return a.score != b.score ? a.score < b.score : a.pos > b.pos;
  }
};

}  // namespace

Llama2cTokenizer::Llama2cTokenizer(std::vector<std::string> vocab, std::vector<float> scores)
    : vocab_(std::move(vocab)), scores_(std::move(scores)) {
  lookup_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) lookup_.emplace(vocab_[i], static_cast<int32_t>(i));
}

std::shared_ptr<Llama2cTokenizer> Llama2cTokenizer::parse(std::string_view bytes,
                                                          int32_t vocab_size,
                                                          const std::string& source) {
  if (vocab_size <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                source + ": vocab_size must be positive, got " + std::to_string(vocab_size));
  }
  size_t pos = 0;
  int32_t max_token_length = 0;
  if (!read_pod(bytes, pos, &max_token_length) || max_token_length < 0) {
    throw Error(ErrorCode::kInvalidArgument, source + ": missing or bad max_token_length header");
  }
  std::vector<std::string> vocab(static_cast<size_t>(vocab_size));
  std::vector<float> scores(static_cast<size_t>(vocab_size));
  for (int32_t i = 0; i < vocab_size; ++i) {
    int32_t len = 0;
    if (!read_pod(bytes, pos, &scores[i]) || !read_pod(bytes, pos, &len) || len < 0 ||
        bytes.size() - pos < static_cast<size_t>(len)) {
      throw Error(ErrorCode::kInvalidArgument,
                  source + ": truncated or corrupt at token " + std::to_string(i) +
                      " (vocab_size " + std::to_string(vocab_size) + " expects more tokens)");
    }
    vocab[i].assign(bytes.data() + pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  auto tok = std::make_shared<Llama2cTokenizer>(std::move(vocab), std::move(scores));
  tok->bos_id = vocab_size > 1 ? std::optional<int32_t>(1) : std::nullopt;
  tok->eos_id = vocab_size > 2 ? std::optional<int32_t>(2) : std::nullopt;
  return tok;
}

std::shared_ptr<Llama2cTokenizer> Llama2cTokenizer::load(const std::filesystem::path& path,
                                                         int32_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, path.string() + ": cannot open llama2.c tokenizer");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse(buffer.str(), vocab_size, path.string());
}

std::optional<int32_t> Llama2cTokenizer::token_to_id(std::string_view token) const {
  auto it = lookup_.find(token);
  if (it == lookup_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Llama2cTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return vocab_[id];
}

std::vector<int32_t> Llama2cTokenizer::initial_tokens(std::string_view text, bool add_bos) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() + 2);
  if (add_bos) tokens.push_back(kBos);
  if (!text.empty()) {
    // run.c looks " " up (its dummy prefix); a vocab without it gets the byte token instead.
    tokens.push_back(token_to_id(" ").value_or(' ' + 3));
  }
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) buf.clear();  // a new code point starts
    buf.push_back(static_cast<char>(c));
    const unsigned char next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if ((next & 0xC0) == 0x80 && buf.size() < 4) continue;
    if (auto id = token_to_id(buf)) {
      tokens.push_back(*id);
    } else {
      for (char b : buf) tokens.push_back(static_cast<unsigned char>(b) + 3);
    }
    buf.clear();
  }
  return tokens;
}

// run.c merges the best pair, rescans, repeats: O(n^2) lookups. The same sequence of merges
// comes from a max-heap keyed on (score, position) over a linked list of tokens.
void Llama2cTokenizer::merge_pairs(std::vector<int32_t>& tokens) const {
  const auto n = static_cast<int32_t>(tokens.size());
  std::vector<int32_t> next(n);
  std::vector<int32_t> prev(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::priority_queue<PairCandidate, std::vector<PairCandidate>, PairAfter> queue;
  std::string joined;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    const int32_t left = tokens[pos];
    const int32_t right = tokens[next[pos]];
    if (left < 0 || left >= vocab_size() || right < 0 || right >= vocab_size()) return;
    joined = vocab_[left];
    joined += vocab_[right];
    auto id = token_to_id(joined);
    if (id && scores_[*id] > kNoScore) queue.push({scores_[*id], pos, left, right, *id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const PairCandidate top = queue.top();
    queue.pop();
    const int32_t pos = top.pos;
    if (!alive[pos] || next[pos] < 0 || tokens[pos] != top.left || tokens[next[pos]] != top.right) {
      continue;  // stale
    }
    const int32_t right = next[pos];
    tokens[pos] = top.merged;
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    push_pair(prev[pos]);
    push_pair(pos);
  }
  std::vector<int32_t> out;
  out.reserve(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) out.push_back(tokens[i]);
  }
  tokens = std::move(out);
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text,
                                              bool add_special_tokens) const {
  std::vector<int32_t> tokens = initial_tokens(text, add_special_tokens);
  merge_pairs(tokens);
  return tokens;
}

std::string Llama2cTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special(id)) continue;
    std::string_view piece = vocab_[id];
    // "following BOS token, sentencepiece decoder strips any leading whitespace"
    if (i > 0 && ids[i - 1] == kBos && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    const int byte = parse_raw_byte(piece);
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
    } else {
      bytes.append(piece);
    }
  }
  return utf8::from_lossy(bytes);
}

}  // namespace rill
