#include "engine/toolcall/json_scanner.h"

#include <gtest/gtest.h>

#include <string>

namespace rill::toolcall {
namespace {

// kDone at the last byte, kMore before: "valid"; kError anywhere: "error"; else "incomplete".
std::string scan(const std::string& text) {
  JsonScanner s;
  for (size_t i = 0; i < text.size(); ++i) {
    const JsonScanner::Result r = s.feed(text[i]);
    if (r == JsonScanner::Result::kError) return "error";
    if (r == JsonScanner::Result::kDone) return i + 1 == text.size() ? "valid" : "error";
  }
  return "incomplete";
}

TEST(JsonScanner, AcceptsValidValues) {
  for (const char* v : {R"({})", R"([])", R"("a\"b\\c\u00e9")", "true", "null", "false",
                        R"({"a": [1, -2.5e+3, 0, 0.25, 1E9, true, null, {"b": "c"}], "d": {}})",
                        " { \"x\" :\n[ ] }", R"({"k": "\u00e9\n"})", "[-0]", "[1e5]"}) {
    EXPECT_EQ(scan(v), "valid") << v;
  }
}

TEST(JsonScanner, RejectsInvalidBytesAtOnce) {
  for (const char* v :
       {"{a", "{\"a\" 1", "[1,]", "[01]", "{\"a\":}", "tru e", "[1.]", "[-]", "\"\\x\"",
        "\"\\u12g4\"", "[1e]", "{\"a\":1,}", "]", "{\"a\":1]", "\"a\nb\"", "{} x"}) {
    EXPECT_EQ(scan(v), "error") << v;
  }
}

TEST(JsonScanner, PrefixesAreIncomplete) {
  for (const char* v : {"{", "{\"a\"", "{\"a\":", "{\"a\": [1, 2", "\"abc", "tr", "[1.5e"})
    EXPECT_EQ(scan(v), "incomplete") << v;
}

TEST(JsonScanner, DepthIsBounded) {
  EXPECT_EQ(
      scan(std::string(JsonScanner::kMaxDepth, '[') + std::string(JsonScanner::kMaxDepth, ']')),
      "valid");
  EXPECT_EQ(scan(std::string(JsonScanner::kMaxDepth + 1, '[')), "error");
  EXPECT_EQ(scan(std::string(100000, '[')), "error");  // no recursion, no growth past the bound
}

}  // namespace
}  // namespace rill::toolcall
