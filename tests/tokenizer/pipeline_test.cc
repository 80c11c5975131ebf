// Normalizers, pre-tokenizers and post-processors, checked directly and through tokenizer.json.
#include <gtest/gtest.h>

#include <random>

#include "engine/error.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "tests/tokenizer/test_util.h"

namespace rill {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;
using nlohmann::json;

Pieces texts(const std::vector<PreToken>& pieces) {
  Pieces out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

Pieces split_dashes(SplitBehavior behavior) {
  SplitPreTokenizer split(make_literal_pattern("-"), behavior, false);
  std::vector<PreToken> pieces{{"the-final--countdown", true}};
  split.pre_tokenize(pieces);
  return texts(pieces);
}

// The examples of HF's SplitDelimiterBehavior documentation.
TEST(PreTokenizer, SplitBehaviors) {
  EXPECT_EQ(split_dashes(SplitBehavior::kRemoved), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(split_dashes(SplitBehavior::kIsolated),
            (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_dashes(SplitBehavior::kMergedWithPrevious),
            (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_dashes(SplitBehavior::kMergedWithNext),
            (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_dashes(SplitBehavior::kContiguous),
            (Pieces{"the", "-", "final", "--", "countdown"}));
  SplitPreTokenizer inverted(make_literal_pattern("-"), SplitBehavior::kRemoved, true);
  std::vector<PreToken> pieces{{"a-b", true}};
  inverted.pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), Pieces{"-"});
}

TEST(PreTokenizer, ByteLevelAndMetaspace) {
  std::vector<PreToken> pieces{{"Hello world", true}};
  ByteLevelPreTokenizer(false, true).pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), (Pieces{"Hello", "\u0120world"}));
  pieces = {{"Hello  \u00e9", true}};
  ByteLevelPreTokenizer(true, true).pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), (Pieces{"\u0120Hello", "\u0120", "\u0120\u00c3\u00a9"}));

  pieces = {{"Hey   friend!", true}};
  MetaspacePreTokenizer("\u2581", PrependScheme::kAlways, true).pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), (Pieces{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  pieces = {{"Hey you", false}};
  MetaspacePreTokenizer("\u2581", PrependScheme::kFirst, false).pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), (Pieces{"Hey\u2581you"}));  // not at the start of the input
  pieces = {{"Hey you", true}};
  MetaspacePreTokenizer("\u2581", PrependScheme::kFirst, false).pre_tokenize(pieces);
  EXPECT_EQ(texts(pieces), (Pieces{"\u2581Hey\u2581you"}));
}

TEST(PreTokenizer, FromJson) {
  auto digits = [](bool individual, const std::string& text) {
    json v = json::object();
    for (const char* s : {"a", "1", "2", "3", "123", "b"}) v[s] = static_cast<int>(v.size());
    json doc = test::bpe_json(v, json::array());
    doc["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", individual}};
    // ignore_merges maps each whole piece to its vocab id, so the ids show the split.
    doc["model"]["ignore_merges"] = true;
    return test::load(doc).encode(text);
  };
  EXPECT_EQ(digits(true, "a123b"), (Ids{0, 1, 2, 3, 5}));
  EXPECT_EQ(digits(false, "a123b"), (Ids{0, 4, 5}));
}

TEST(Normalizer, Basics) {
  EXPECT_EQ(PrependNormalizer("\u2581").normalize("hi"), "\u2581hi");
  EXPECT_EQ(PrependNormalizer("\u2581").normalize(""), "");
  EXPECT_EQ(ReplaceNormalizer(" ", "\u2581").normalize("a b  c"), "a\u2581b\u2581\u2581c");
  EXPECT_EQ(ReplaceNormalizer(std::make_unique<Regex>(" {2,}"), " ").normalize("a   b  c d"),
            "a b c d");
  EXPECT_EQ(StripNormalizer(true, true).normalize(" \t x y \u3000"), "x y");
  EXPECT_EQ(StripNormalizer(false, true).normalize("  x  "), "  x");
  EXPECT_EQ(LowercaseNormalizer().normalize("ABC \u00c9"), "abc \u00e9");
  EXPECT_EQ(UnicodeNormalizer(UnicodeForm::kNfc).normalize("e\u0301"), "\u00e9");
}

TEST(Normalizer, SentencePieceStyleThroughJson) {
  Tokenizer t = test::load(test::sentencepiece_json({"\u2581", "h", "i", "\u2581h", "\u2581hi"},
                                                    {"\u2581 h", "\u2581h i"}));
  // <s> + ▁hi ▁hi
  EXPECT_EQ(t.encode("hi hi"), (Ids{1, 263, 263}));
  EXPECT_EQ(t.encode("hi hi", false), (Ids{263, 263}));
  EXPECT_EQ(t.encode(""), (Ids{1}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 263, 263}), "hi hi");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 263, 263}, false), "<s> hi hi");
  // Added tokens split the input before the normalizer: each piece gets its own "▁".
  EXPECT_EQ(t.encode("hi</s>hi", false), (Ids{263, 2, 263}));
  // Unknown characters fall back to bytes: "é" = <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("\u00e9", false), (Ids{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9}), "\u00e9");
  EXPECT_EQ(t.bos_id(), std::nullopt);  // no tokenizer_config.json
}

TEST(PostProcessor, TemplateAndWrap) {
  std::vector<int32_t> ids{5, 6};
  TemplatePostProcessor({{false, {1}}, {true, {}}, {false, {2, 3}}}).process(ids, true);
  EXPECT_EQ(ids, (Ids{1, 5, 6, 2, 3}));
  ids = {5};
  TemplatePostProcessor({{false, {1}}, {true, {}}}).process(ids, false);
  EXPECT_EQ(ids, (Ids{5}));
  ids = {5};
  WrapPostProcessor(101, 102).process(ids, true);
  EXPECT_EQ(ids, (Ids{101, 5, 102}));

  json j = test::bpe_json({{"[CLS]", 0}, {"[SEP]", 1}, {"x", 2}}, json::array());
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 1}}, {"cls", {"[CLS]", 0}}};
  EXPECT_EQ(test::load(j).encode("x"), (Ids{0, 2, 1}));
  EXPECT_EQ(test::load(j).encode("x", false), (Ids{2}));
}

TEST(Tokenizer, ConfigTokensAndVocab) {
  json j = test::byte_level_json({"h e", "l l", "he ll", "hell o"});
  const json config = {{"bos_token", {{"content", "<|endoftext|>"}, {"__type", "AddedToken"}}},
                       {"eos_token", "<|endoftext|>"}};
  Tokenizer t = test::load(j, config);
  const int32_t eot = *t.token_to_id("<|endoftext|>");
  EXPECT_EQ(t.bos_id(), eot);
  EXPECT_EQ(t.eos_id(), eot);
  EXPECT_EQ(t.vocab_size(), eot + 1);
  EXPECT_TRUE(t.is_special(eot));
  EXPECT_FALSE(t.is_special(0));
  EXPECT_EQ(t.id_to_token(*t.token_to_id("hello")), "hello");
  EXPECT_THROW(t.id_to_token(100000), Error);
  EXPECT_THROW(t.id_to_token(-1), Error);
  EXPECT_EQ(t.encode("hello<|endoftext|>"), (Ids{*t.token_to_id("hello"), eot}));
  // Ids outside the vocabulary are skipped by decode, as HF does.
  EXPECT_EQ(t.decode(std::vector<int32_t>{*t.token_to_id("hello"), 99999, -5}), "hello");
  // Invalid UTF-8 input is replaced like from_utf8_lossy instead of failing.
  EXPECT_EQ(t.decode(t.encode("a\xFF")), "a\uFFFD");
}

TEST(Tokenizer, RandomBytesRoundTrip) {
  // Arbitrary bytes never throw; valid text round-trips; invalid bytes come back as U+FFFD.
  const Tokenizer byte_level = test::load(test::byte_level_json({"h e", "\u0120 t"}));
  const Tokenizer sentencepiece =
      test::load(test::sentencepiece_json({"\u2581", "a", "\u2581a"}, {"\u2581 a"}));
  std::mt19937 rng(99);
  for (int iter = 0; iter < 500; ++iter) {
    std::string bytes;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) {
      // Mostly ASCII and UTF-8 lead/continuation bytes, sometimes special-token text.
      const unsigned r = rng() % 10;
      if (r == 0) {
        bytes += "<|endoftext|>";  // special in byte_level, plain text for sentencepiece
      } else if (r < 5) {
        bytes.push_back(static_cast<char>('a' + rng() % 3));
      } else {
        bytes.push_back(static_cast<char>(rng() % 256));
      }
    }
    for (const Tokenizer* t : {&byte_level, &sentencepiece}) {
      const Ids ids = t->encode(bytes, false);
      EXPECT_EQ(t->decode(ids, false), utf8::from_lossy(bytes)) << iter;
    }
  }
}

}  // namespace
}  // namespace rill
