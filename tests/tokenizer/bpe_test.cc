// BPE model semantics on hand-built tokenizer.json documents.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/error.h"
#include "tests/tokenizer/test_util.h"

namespace rill {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

TEST(Bpe, LowestRankMergesFirst) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  // "b c" outranks "a b": a b c -> a bc; "a bc" then makes abc.
  Tokenizer t1 = test::load(test::bpe_json(vocab, {"b c", "a b", "a bc"}));
  EXPECT_EQ(t1.encode("abc"), (Ids{5}));
  // Without "a bc" it stops at a + bc.
  Tokenizer t2 = test::load(test::bpe_json(vocab, {"b c", "a b", "ab c"}));
  EXPECT_EQ(t2.encode("abc"), (Ids{0, 4}));
  // "a b" first: ab c -> abc.
  Tokenizer t3 = test::load(test::bpe_json(vocab, {"a b", "b c", "ab c"}));
  EXPECT_EQ(t3.encode("abc"), (Ids{5}));
}

TEST(Bpe, LeftmostOnTiesAndPairFormat) {
  const json vocab = {{"a", 0}, {"aa", 1}, {"aaaa", 2}};
  const json merges = json::array({json::array({"a", "a"})});  // [["a", "a"]] format
  Tokenizer t = test::load(test::bpe_json(vocab, merges));
  EXPECT_EQ(t.encode("aaa"), (Ids{1, 0}));  // leftmost pair merges first
  EXPECT_EQ(t.encode("aaaaa"), (Ids{1, 1, 0}));
  Tokenizer t2 = test::load(test::bpe_json(vocab, {"a a", "aa aa"}));
  EXPECT_EQ(t2.encode("aaaaa"), (Ids{2, 0}));
}

TEST(Bpe, ByteFallbackUnkAndFuse) {
  json j = test::bpe_json({{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}}, json::array());
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(test::load(j).encode("axyza"), (Ids{1, 0, 0, 0, 1}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(test::load(j).encode("axyza"), (Ids{1, 0, 1}));
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(test::load(j).encode("a\u00e9"), (Ids{1, 2, 3}));     // é = C3 A9
  EXPECT_EQ(test::load(j).encode("\u00e8\u00e8a"), (Ids{0, 1}));  // è = C3 A8: A8 missing
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(test::load(j).encode("xa"), (Ids{1}));  // dropped without unk
}

TEST(Bpe, SubwordPrefixAndSuffix) {
  json j = test::bpe_json({{"a", 0}, {"##b", 1}, {"ab", 2}, {"##c", 3}, {"abc", 4}},
                          {"a ##b", "ab ##c"});
  j["model"]["continuing_subword_prefix"] = "##";
  Tokenizer t = test::load(j);
  EXPECT_EQ(t.encode("abc"), (Ids{4}));
  EXPECT_EQ(t.encode("ab"), (Ids{2}));
  json k = test::bpe_json({{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}, {"b", 3}}, {"a b</w>"});
  k["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(test::load(k).encode("ab"), (Ids{2}));
  EXPECT_EQ(test::load(k).encode("ba"), (Ids{3}));  // "a</w>" is unknown and dropped
}

TEST(Bpe, IgnoreMerges) {
  json j = test::bpe_json({{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}, {"ab", 4}}, {"a b"});
  EXPECT_EQ(test::load(j).encode("abc"), (Ids{4, 2}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(test::load(j).encode("abc"), (Ids{3}));
}

TEST(Bpe, BadFilesAreClearErrors) {
  try {
    test::load(test::bpe_json({{"a", 0}}, {"a b"}));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  json j = test::bpe_json({{"a", 0}}, json::array());
  j["model"]["type"] = "WordPiece";
  try {
    test::load(j);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("unsupported model type 'WordPiece'"), std::string::npos);
  }
  j = test::bpe_json({{"a", 0}}, json::array());
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  try {
    test::load(j);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("test.json: unsupported pre_tokenizer type 'UnicodeScripts'"),
        std::string::npos)
        << e.what();
  }
  j = test::bpe_json({{"a", 0}}, json::array());
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "(?<=x)y"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  EXPECT_THROW(test::load(j), Error);
  EXPECT_THROW(Tokenizer::from_hf_json("{not json"), Error);
  EXPECT_THROW(Tokenizer::from_hf_json("[]"), Error);
  EXPECT_THROW(Tokenizer::from_hf_dir("/nonexistent/dir"), Error);
}

TEST(Bpe, WholeTextWithoutPreTokenizerIsFast) {
  // SentencePiece-style pipelines run BPE over the whole text: must not be quadratic.
  Tokenizer t = test::load(test::sentencepiece_json({"\u2581", "a", "b", "ab", "\u2581ab", "abab"},
                                                    {"a b", "\u2581 ab", "ab ab"}));
  std::string text;
  for (int i = 0; i < 50000; ++i) text += (i % 7 == 0) ? "ab " : "ab";
  const auto start = std::chrono::steady_clock::now();
  const auto ids = t.encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(ids.size(), 10000u);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_LT(seconds, 2.0);
}

TEST(Bpe, ConcurrentEncodeIsSafe) {
  // The per-word cache is shared: encode from several threads on a cold tokenizer.
  const json j = test::byte_level_json({"h e", "l l", "he ll", "hell o", "\u0120 w", "o r"});
  const Tokenizer reference = test::load(j);
  const Tokenizer shared = test::load(j);
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("hello world " + std::to_string(i * 7919) + " word" + std::to_string(i % 5));
    expected.push_back(reference.encode(texts.back()));
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) {
        const size_t i = static_cast<size_t>(k * 13 + t) % texts.size();
        if (shared.encode(texts[i]) != expected[i]) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace rill
