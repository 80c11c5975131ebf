// Added-token splitting: the cases of HF's added_vocabulary.rs tests, plus longest match.
#include "engine/tokenizer/added_vocab.h"

#include <gtest/gtest.h>

#include "engine/tokenizer/normalizer.h"
#include "tests/tokenizer/test_util.h"

namespace rill {
namespace {

using Split = std::vector<std::pair<std::string, int32_t>>;

AddedToken token(int32_t id, std::string content, bool special) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  t.special = special;
  t.normalized = !special;
  return t;
}

// Raw split, then normalize the remaining pieces and split them on normalized tokens.
Split extract(const AddedVocabulary& vocab, const Normalizer* normalizer, std::string_view text) {
  Split out;
  for (const Segment& raw : vocab.split(text, false)) {
    if (raw.id >= 0) {
      out.emplace_back(std::string(raw.text), raw.id);
      continue;
    }
    const std::string normalized =
        normalizer ? normalizer->normalize(raw.text) : std::string(raw.text);
    for (const Segment& s : vocab.split(normalized, true))
      out.emplace_back(std::string(s.text), s.id);
  }
  return out;
}

TEST(AddedTokens, ExtractsNormalAndSpecial) {
  AddedVocabulary vocab({token(0, "my", false), token(1, "name", false), token(2, "[CLS]", true),
                         token(3, "[SEP]", true)},
                        nullptr);
  EXPECT_EQ(extract(vocab, nullptr, "[CLS] My name is Anthony [SEP]"),
            (Split{{"[CLS]", 2}, {" My ", -1}, {"name", 1}, {" is Anthony ", -1}, {"[SEP]", 3}}));
}

TEST(AddedTokens, StripSingleWordAndNormalized) {
  LowercaseNormalizer lower;
  AddedToken my = token(0, "my", false);
  my.lstrip = my.rstrip = true;
  AddedToken ony = token(2, "ony", false);
  ony.single_word = true;
  AddedVocabulary vocab(
      {my, token(1, "name", false), ony, token(3, "[CLS]", true), token(4, "[SEP]", true)}, &lower);
  EXPECT_EQ(extract(vocab, &lower, "[CLS] My name is Anthony [SEP]"),
            (Split{{"[CLS]", 3}, {" my ", 0}, {"name", 1}, {" is anthony ", -1}, {"[SEP]", 4}}));

  AddedToken mask = token(0, "<mask>", false);
  mask.single_word = true;
  AddedVocabulary masks({mask}, &lower);
  EXPECT_EQ(extract(masks, &lower, "<mask> My name <mask> A<mask> <mask>ony <mask>"),
            (Split{{"<mask>", 0},
                   {" my name ", -1},
                   {"<mask>", 0},
                   {" a<mask> <mask>ony ", -1},
                   {"<mask>", 0}}));
}

TEST(AddedTokens, LongestMatchWins) {
  AddedVocabulary vocab({token(0, "<|a|>", true), token(1, "<|a|>b", true), token(2, "b", false)},
                        nullptr);
  EXPECT_EQ(extract(vocab, nullptr, "x<|a|>bb<|a|>"),
            (Split{{"x", -1}, {"<|a|>b", 1}, {"b", 2}, {"<|a|>", 0}}));
}

TEST(AddedTokens, ThroughTheTokenizer) {
  nlohmann::json j = test::byte_level_json({});
  j["added_tokens"].push_back({{"id", 300},
                               {"content", "  "},
                               {"special", false},
                               {"normalized", true},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false}});
  Tokenizer t = test::load(j);
  EXPECT_EQ(t.vocab_size(), 301);
  EXPECT_FALSE(t.is_special(300));
  // "a   b": "a", then the added "  ", then " b" through byte-level (Ġ=32, b=98).
  EXPECT_EQ(t.encode("a   b"), (std::vector<int32_t>{97, 300, 32, 98}));
  EXPECT_EQ(t.decode(t.encode("a   b")), "a   b");
  const int32_t eot = *t.token_to_id("<|endoftext|>");
  EXPECT_EQ(t.decode(std::vector<int32_t>{97, eot, 98}), "ab");
  EXPECT_EQ(t.decode(std::vector<int32_t>{97, eot, 98}, false), "a<|endoftext|>b");
}

}  // namespace
}  // namespace rill
