#include "engine/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace rill {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8, LossyMatchesRustMaximalSubparts) {
  // Expected values are what Rust's String::from_utf8_lossy returns.
  EXPECT_EQ(utf8::from_lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(utf8::from_lossy("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(utf8::from_lossy("\xC3"), kFffd);
  EXPECT_EQ(utf8::from_lossy("\xE2\x82"), kFffd);  // truncated 3-byte
  EXPECT_EQ(utf8::from_lossy("\xE2\x82"
                             "a"),
            kFffd + "a");
  EXPECT_EQ(utf8::from_lossy("\xF0\x9F\x91"), kFffd);  // truncated 4-byte
  EXPECT_EQ(utf8::from_lossy("\x80"), kFffd);          // lone continuation
  EXPECT_EQ(utf8::from_lossy("\x80\x80"), repeat(kFffd, 2));
  EXPECT_EQ(utf8::from_lossy("a\xFF"
                             "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(utf8::from_lossy("\xC0\xAF"), repeat(kFffd, 2));            // overlong
  EXPECT_EQ(utf8::from_lossy("\xE0\x80\x80"), repeat(kFffd, 3));        // overlong 3-byte
  EXPECT_EQ(utf8::from_lossy("\xED\xA0\x80"), repeat(kFffd, 3));        // surrogate
  EXPECT_EQ(utf8::from_lossy("\xF4\x90\x80\x80"), repeat(kFffd, 4));    // > U+10FFFF
  EXPECT_EQ(utf8::from_lossy("\xF0\x9F\x91\x8D"), "\xF0\x9F\x91\x8D");  // thumbs up
  EXPECT_EQ(utf8::from_lossy("\xE2\x82\xE2\x82\xAC"), kFffd + "\xE2\x82\xAC");
}

TEST(Utf8, Validity) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("h\xC3\xA9llo \xF0\x9F\xA4\x96"));
  EXPECT_FALSE(utf8::is_valid("\xC3"));
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));
  EXPECT_FALSE(utf8::is_valid("\xC1\xBF"));
}

TEST(Utf8, EncodeDecodeRoundTrip) {
  for (char32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    const std::string s = utf8::encode(cp);
    size_t pos = 0;
    EXPECT_EQ(utf8::next(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
  EXPECT_EQ(utf8::encode(0xD800), kFffd);
  EXPECT_EQ(utf8::encode(0x110000), kFffd);
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x91\x8D";
  EXPECT_EQ(utf8::count(text), 4u);
  EXPECT_EQ(utf8::from_u32(utf8::to_u32(text)), text);
  EXPECT_EQ(utf8::prev_boundary(text, text.size()), text.size() - 4);
  EXPECT_EQ(utf8::prev_boundary(text, 3), 1u);
}

}  // namespace
}  // namespace rill
