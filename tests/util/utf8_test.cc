#include "engine/util/utf8.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

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

TEST(Utf8, StrictDecodeAcceptsEveryBoundaryOfTheWellFormedTable) {
  // (bytes, code point): the first and last code point of each row of Unicode's table D92.
  const std::pair<std::string, char32_t> good[] = {
      {std::string(1, '\0'), 0x0},
      {"\x7F", 0x7F},
      {"\xC2\x80", 0x80},
      {"\xDF\xBF", 0x7FF},
      {"\xE0\xA0\x80", 0x800},
      {"\xED\x9F\xBF", 0xD7FF},
      {"\xEE\x80\x80", 0xE000},
      {"\xEF\xBF\xBF", 0xFFFF},
      {"\xF0\x90\x80\x80", 0x10000},
      {"\xF4\x8F\xBF\xBF", 0x10FFFF},
  };
  for (const auto& [bytes, cp] : good) {
    size_t pos = 0;
    const std::optional<char32_t> got = utf8::decode(bytes, pos);
    ASSERT_TRUE(got.has_value()) << std::hex << static_cast<uint32_t>(cp);
    EXPECT_EQ(*got, cp);
    EXPECT_EQ(pos, bytes.size());
  }
}

TEST(Utf8, StrictDecodeRefusesOverlongsSurrogatesAndOutOfRange) {
  const std::string bad[] = {
      "\x80",              // stray continuation byte
      "\xBF",              // stray continuation byte
      "\xC0\x80",          // overlong NUL
      "\xC1\xBF",          // overlong U+007F
      "\xE0\x80\x80",      // overlong 3-byte
      "\xE0\x9F\xBF",      // overlong U+07FF
      "\xF0\x80\x80\x80",  // overlong 4-byte
      "\xF0\x8F\xBF\xBF",  // overlong U+FFFF
      "\xED\xA0\x80",      // U+D800, a surrogate
      "\xED\xBF\xBF",      // U+DFFF, a surrogate
      "\xF4\x90\x80\x80",  // U+110000
      "\xF5\x80\x80\x80",  // lead byte past U+10FFFF
      "\xFF",              // never in UTF-8
      "\xC3",              // truncated 2-byte
      "\xE2\x82",          // truncated 3-byte
      "\xF0\x9F\x91",      // truncated 4-byte
      "\xC3(",             // continuation missing
      "\xE2\x82(",         // continuation missing
  };
  for (const std::string& bytes : bad) {
    size_t pos = 0;
    EXPECT_FALSE(utf8::decode(bytes, pos).has_value()) << testing::PrintToString(bytes);
    EXPECT_EQ(pos, 0u) << "pos moved on a refused sequence";
  }
}

TEST(Utf8, StrictDecodeWalksMixedTextAndStopsAtTheBadByte) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x91\x8D\xED\xA0\x80";
  size_t pos = 0;
  std::u32string got;
  while (const std::optional<char32_t> cp = utf8::decode(text, pos)) got += *cp;
  EXPECT_EQ(got, U"a\u00E9\u20AC\U0001F44D");
  EXPECT_EQ(pos, text.size() - 3);  // at the surrogate
  EXPECT_FALSE(utf8::decode(text, pos).has_value());
  size_t end = text.size();
  EXPECT_FALSE(utf8::decode(text, end).has_value());  // past the end
}

TEST(Utf8, ScalarValues) {
  EXPECT_TRUE(utf8::is_scalar_value(0xD7FF));
  EXPECT_FALSE(utf8::is_scalar_value(0xD800));
  EXPECT_FALSE(utf8::is_scalar_value(0xDFFF));
  EXPECT_TRUE(utf8::is_scalar_value(0xE000));
  EXPECT_TRUE(utf8::is_scalar_value(0x10FFFF));
  EXPECT_FALSE(utf8::is_scalar_value(0x110000));
}

}  // namespace
}  // namespace rill
