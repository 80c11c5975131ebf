// IncrementalDetokenizer invariants: every piece is valid UTF-8, pieces + flush == decode(ids)
// for every prefix, and with a context the output continues decode(context) exactly.
#include <gtest/gtest.h>

#include <random>

#include "tests/tokenizer/test_util.h"

namespace rill {
namespace {

using Ids = std::vector<int32_t>;

// Streams ids and checks the invariants after every token; returns the streamed text.
void expect_streams_like_decode(const Tokenizer& t, const Ids& context, const Ids& generated,
                                bool skip_special) {
  IncrementalDetokenizer detok(t, skip_special, context);
  std::string streamed;
  Ids all = context;
  for (int32_t id : generated) {
    const std::string piece = detok.push(id);
    ASSERT_TRUE(utf8::is_valid(piece)) << "id " << id;
    streamed += piece;
    all.push_back(id);
  }
  streamed += detok.flush();
  const std::string full = t.decode(all, skip_special);
  const std::string prefix = t.decode(context, skip_special);
  // When the context ends inside a character its decode is not a prefix of the full decode;
  // the stream then continues from the longest common prefix (on a character boundary).
  size_t common = 0;
  while (common < prefix.size() && common < full.size() && prefix[common] == full[common]) ++common;
  while (common > 0 && common < full.size() &&
         (static_cast<unsigned char>(full[common]) & 0xC0) == 0x80) {
    --common;
  }
  EXPECT_EQ(streamed, full.substr(common))
      << "context " << context.size() << " tokens, generated " << generated.size();
}

void check_all_splits(const Tokenizer& t, const std::string& text) {
  const Ids ids = t.encode(text);
  for (bool skip : {true, false}) {
    for (size_t n = 0; n <= ids.size(); ++n) {
      // Every prefix streamed from scratch, and every split into context + generated.
      expect_streams_like_decode(t, {}, Ids(ids.begin(), ids.begin() + n), skip);
      expect_streams_like_decode(t, Ids(ids.begin(), ids.begin() + n),
                                 Ids(ids.begin() + n, ids.end()), skip);
    }
  }
}

const char* kTexts[] = {
    "Hello world, \u00e9t\u00e9 \u20ac5",
    "  leading and trailing  ",
    "\U0001F44D\U0001F3FD \U0001F469\u200D\U0001F4BB \u4E2D\u6587 \u0645\u0631\u062D\u0628\u0627",
    "a<|endoftext|>b</s>c<s>",
};

TEST(Detokenizer, ByteLevel) {
  Tokenizer t = test::load(test::byte_level_json({"H e", "l l", "He ll", "\u0120 w", "o r"}));
  for (const char* text : kTexts) check_all_splits(t, text);
}

TEST(Detokenizer, SentencePieceByteFallback) {
  Tokenizer t = test::load(test::sentencepiece_json(
      {"\u2581", "H", "e", "l", "o", "\u2581H", "ll", "\u00e9", "\u2581\u00e9"},
      {"\u2581 H", "l l", "\u2581 \u00e9"}));
  for (const char* text : kTexts) check_all_splits(t, text);
  // The first generated token keeps its leading space after a context.
  const Ids ctx = t.encode("Hello");
  const Ids gen = t.encode(" \u00e9", false);
  IncrementalDetokenizer detok(t, true, ctx);
  std::string out;
  for (int32_t id : gen) out += detok.push(id);
  out += detok.flush();
  EXPECT_EQ(out, t.decode([&] {
                    Ids all = ctx;
                    all.insert(all.end(), gen.begin(), gen.end());
                    return all;
                  }())
                     .substr(t.decode(ctx).size()));
  EXPECT_EQ(out.substr(0, 1), " ");
}

TEST(Detokenizer, MetaspaceDecoder) {
  nlohmann::json j = test::sentencepiece_json({"\u2581", "a", "b", "\u2581a", "\u2581b"},
                                              {"\u2581 a", "\u2581 b"});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  j["decoder"] = {{"type", "Metaspace"},
                  {"replacement", "\u2581"},
                  {"prepend_scheme", "first"},
                  {"split", false}};
  Tokenizer t = test::load(j);
  check_all_splits(t, "a b ab  a");
}

TEST(Detokenizer, RandomIdsNeverBreakTheInvariant) {
  // Random ids (bytes, specials, merged tokens) decode to invalid UTF-8 in many ways.
  Tokenizer bl = test::load(test::byte_level_json({"H e", "l l"}));
  Tokenizer sp = test::load(test::sentencepiece_json({"\u2581", "a", "\u2581a"}, {"\u2581 a"}));
  std::mt19937 rng(1234);
  for (const Tokenizer* t : {&bl, &sp}) {
    for (int iter = 0; iter < 300; ++iter) {
      Ids ids;
      const int len = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < len; ++i) ids.push_back(static_cast<int32_t>(rng() % t->vocab_size()));
      const size_t split = rng() % (ids.size() + 1);
      const bool skip = rng() % 2 == 0;
      expect_streams_like_decode(*t, Ids(ids.begin(), ids.begin() + split),
                                 Ids(ids.begin() + split, ids.end()), skip);
    }
  }
}

TEST(Detokenizer, StreamsBeforeTheEnd) {
  // Complete characters are emitted as soon as they are known, not only at flush.
  Tokenizer t = test::load(test::byte_level_json({}));
  IncrementalDetokenizer detok(t);
  EXPECT_EQ(detok.push('a'), "a");
  EXPECT_EQ(detok.push(0xE2), "");  // first byte of €
  EXPECT_EQ(detok.push(0x82), "");
  // Byte-level ids are the bytes of the stand-in chars: the id of byte 0xAC is 0xAC here.
  EXPECT_EQ(detok.push(0xAC), "\u20AC");
  EXPECT_EQ(detok.push(' '), " ");
  EXPECT_EQ(detok.flush(), "");
}

}  // namespace
}  // namespace rill
