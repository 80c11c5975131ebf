#include "engine/tokenizer/decoder.h"

#include <gtest/gtest.h>

namespace rill {
namespace {

using Tokens = std::vector<std::string>;

Tokens run(const Decoder& d, Tokens tokens) {
  d.decode_chain(tokens);
  return tokens;
}

TEST(Decoder, ByteFallbackRunsMatchHf) {
  // The cases of HF's decoders/byte_fallback.rs tests.
  ByteFallbackDecoder d;
  EXPECT_EQ(run(d, {"Hey", "friend!"}), (Tokens{"Hey", "friend!"}));
  EXPECT_EQ(run(d, {"<0x61>"}), Tokens{"a"});
  EXPECT_EQ(run(d, {"<0xE5>"}), Tokens{"\uFFFD"});
  EXPECT_EQ(run(d, {"<0xE5>", "<0x8f>"}), (Tokens{"\uFFFD", "\uFFFD"}));
  EXPECT_EQ(run(d, {"<0xE5>", "<0x8f>", "<0xab>"}), Tokens{"\u53EB"});
  EXPECT_EQ(run(d, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), (Tokens{"\u53EB", "a"}));
  EXPECT_EQ(run(d, {"<0xE5>", "<0x8f>", "a"}), (Tokens{"\uFFFD", "\uFFFD", "a"}));
  EXPECT_EQ(run(d, {"<0xzz>", "<0x4>"}), (Tokens{"<0xzz>", "<0x4>"}));
}

TEST(Decoder, ByteLevelIsLossy) {
  ByteLevelDecoder d;
  EXPECT_EQ(run(d, {"Hello", "\u0120world"}), Tokens{"Hello world"});
  EXPECT_EQ(run(d, {"\u00c3"}), Tokens{"\uFFFD"});                            // lone C3
  EXPECT_EQ(run(d, {"\u00c3", "\u00a9"}), Tokens{"\u00e9"});                  // C3 A9
  EXPECT_EQ(run(d, {"\u00e2\u0124", "x"}), Tokens{"\uFFFDx"});                // E2 82 then x
  EXPECT_EQ(run(d, {"a", "<|endoftext|>", "b"}), Tokens{"a<|endoftext|>b"});  // unmapped chars
  EXPECT_EQ(run(d, {"  "}), Tokens{"  "});
}

TEST(Decoder, SentencePieceChain) {
  std::vector<std::unique_ptr<Decoder>> steps;
  steps.push_back(std::make_unique<ReplaceDecoder>("\u2581", " "));
  steps.push_back(std::make_unique<ByteFallbackDecoder>());
  steps.push_back(std::make_unique<FuseDecoder>());
  steps.push_back(std::make_unique<StripDecoder>(U' ', 1, 0));
  SequenceDecoder d(std::move(steps));
  EXPECT_TRUE(d.has_byte_fallback());
  EXPECT_EQ(run(d, {"\u2581Hello", "\u2581world", "<0x21>"}), Tokens{"Hello world!"});
  EXPECT_EQ(run(d, {"<s>", "\u2581Hi"}), Tokens{"<s> Hi"});
  EXPECT_EQ(run(d, {"\u2581\u2581x"}), Tokens{" x"});  // only one space stripped
}

TEST(Decoder, MetaspaceStripStripsFirstToken) {
  MetaspaceDecoder d(U'\u2581', PrependScheme::kFirst);
  EXPECT_EQ(run(d, {"\u2581Hey", "\u2581friend!"}), (Tokens{"Hey", " friend!"}));
  MetaspaceDecoder never(U'\u2581', PrependScheme::kNever);
  EXPECT_EQ(run(never, {"\u2581Hey", "\u2581friend!"}), (Tokens{" Hey", " friend!"}));
  StripDecoder strip(U'x', 2, 1);
  EXPECT_EQ(run(strip, {"xxxaxx", "ax", "x"}), (Tokens{"xax", "a", ""}));
}

TEST(Decoder, WordPieceAndSuffix) {
  WordPieceDecoder wp("##", true);
  EXPECT_EQ(run(wp, {"I", "'m", "play", "##ing", "."}), (Tokens{"I", "'m", " play", "ing", "."}));
  BpeSuffixDecoder suffix("</w>");
  EXPECT_EQ(run(suffix, {"hel", "lo</w>", "world</w>"}), (Tokens{"hel", "lo ", "world"}));
}

}  // namespace
}  // namespace rill
