// llama2.c tokenizer.bin: hand-built files, and the heap-based merge loop checked against a
// direct port of run.c's O(n^2) encode() on many inputs.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "engine/error.h"
#include "tests/tokenizer/test_util.h"

namespace rill {
namespace {

using Ids = std::vector<int32_t>;

struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

// <unk>, BOS, EOS, 256 byte tokens, then `extra` pieces with their scores.
Vocab make_vocab(const std::vector<std::pair<std::string, float>>& extra) {
  Vocab v;
  v.pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.pieces.push_back(name);
  }
  v.scores.assign(v.pieces.size(), 0.0f);
  for (const auto& [piece, score] : extra) {
    v.pieces.push_back(piece);
    v.scores.push_back(score);
  }
  return v;
}

std::string serialize(const Vocab& v) {
  std::string bytes;
  auto put = [&bytes](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  int32_t max_len = 0;
  for (const auto& p : v.pieces)
    max_len = std::max<int32_t>(max_len, static_cast<int32_t>(p.size()));
  put(&max_len, 4);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    const auto len = static_cast<int32_t>(v.pieces[i].size());
    put(&v.scores[i], 4);
    put(&len, 4);
    put(v.pieces[i].data(), v.pieces[i].size());
  }
  return bytes;
}

Tokenizer load(const Vocab& v, const std::string& name) {
  return Tokenizer::from_llama2c(test::write_temp(name, serialize(v)),
                                 static_cast<int32_t>(v.pieces.size()));
}

// run.c encode(), transcribed: rescans all pairs after every merge.
Ids reference_encode(const Vocab& v, const std::string& text, bool bos) {
  std::map<std::string, int32_t> lookup;
  for (size_t i = v.pieces.size(); i-- > 0;) lookup[v.pieces[i]] = static_cast<int32_t>(i);
  auto find = [&](const std::string& s) {
    auto it = lookup.find(s);
    return it == lookup.end() ? -1 : it->second;
  };
  Ids tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) tokens.push_back(find(" "));
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((text[i] & 0xC0) != 0x80) buf.clear();
    buf.push_back(text[i]);
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if ((next & 0xC0) == 0x80 && buf.size() < 4) continue;
    const int32_t id = find(buf);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (char c : buf) tokens.push_back(static_cast<unsigned char>(c) + 3);
    }
    buf.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    int best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = find(v.pieces[tokens[i]] + v.pieces[tokens[i + 1]]);
      if (id != -1 && v.scores[id] > best_score) {
        best_score = v.scores[id];
        best_id = id;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return tokens;
}

const Vocab kVocab = make_vocab({{" ", -10},
                                 {"a", -10},
                                 {"b", -10},
                                 {" a", -2},
                                 {"ab", -1},
                                 {" ab", -3},
                                 {"\xC3\xA9", -10},
                                 {"ba", -1}});

TEST(Llama2c, EncodeDecode) {
  Tokenizer t = load(kVocab, "basic.bin");
  const int32_t base = 259;  // first extra piece
  EXPECT_EQ(t.vocab_size(), 267);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.encode("ab"), (Ids{1, base + 5}));
  EXPECT_EQ(t.encode("ab", false), (Ids{base + 5}));
  EXPECT_EQ(t.encode(""), (Ids{1}));
  EXPECT_EQ(t.encode("", false), Ids{});
  EXPECT_EQ(t.encode("\xC3\xA9\xC3\xBC", false), (Ids{base, base + 6, 3 + 0xC3, 3 + 0xBC}));
  EXPECT_EQ(t.decode(Ids{1, base + 5}), "ab");  // leading space stripped after BOS
  EXPECT_EQ(t.decode(Ids{1, base + 5}, false), "\n<s>\nab");
  EXPECT_EQ(t.decode(Ids{base + 5}), " ab");
  EXPECT_EQ(t.decode(Ids{3 + 0xC3}), "\uFFFD");
  EXPECT_EQ(t.decode(Ids{3 + 0xC3, 3 + 0xBC}), "\u00FC");
  EXPECT_EQ(t.id_to_token(base + 5), " ab");
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(base));
}

TEST(Llama2c, HeapMergeMatchesRunC) {
  // Scores with ties and overlapping candidates stress the merge order.
  Vocab v = make_vocab({{" ", -5},
                        {"a", -5},
                        {"b", -5},
                        {"c", -5},
                        {"ab", -1},
                        {"bc", -1},
                        {"ca", -2},
                        {"abc", -1},
                        {" a", -3},
                        {"aa", -1},
                        {"aaa", -2},
                        {"bca", -1},
                        {" abc", -4},
                        {"cab", -0.5f},
                        {"\xC3\xA9", -5},
                        {"\xC3\xA9"
                         "a",
                         -2}});
  Tokenizer t = load(v, "ties.bin");
  std::mt19937 rng(7);
  const char* alphabet[] = {"a", "b", "c", " ", "\xC3\xA9", "\xE2\x82\xAC", "x"};
  for (int iter = 0; iter < 400; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % 7];
    ASSERT_EQ(t.encode(text), reference_encode(v, text, true)) << "text: '" << text << "'";
  }
}

TEST(Llama2c, BadFiles) {
  const std::string bytes = serialize(kVocab);
  EXPECT_THROW(Tokenizer::from_llama2c(test::write_temp("short.bin", bytes.substr(0, 100)), 267),
               Error);
  EXPECT_THROW(Tokenizer::from_llama2c(test::write_temp("ok.bin", bytes), 300), Error);
  EXPECT_THROW(Tokenizer::from_llama2c(test::write_temp("ok.bin", bytes), 0), Error);
  try {
    Tokenizer::from_llama2c("/nonexistent/tokenizer.bin", 32000);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace rill
