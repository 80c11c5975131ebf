#include "engine/tokenizer/regex.h"

#include <gtest/gtest.h>

#include <chrono>

#include "engine/error.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace rill {
namespace {

using Pieces = std::vector<std::string>;

constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Pieces matches(std::string_view pattern, std::string_view text) {
  Regex re(pattern);
  Pieces out;
  for (const auto& [b, e] : re.find_all(text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

// Splits (hand-checked against the regex semantics of Oniguruma / Python `regex`).
TEST(Regex, Gpt2Pattern) {
  const auto p = kGpt2Pattern;
  EXPECT_EQ(matches(p, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(matches(p, "I'm fine, you're 'S"),
            (Pieces{"I", "'m", " fine", ",", " you", "'re", " '", "S"}));
  EXPECT_EQ(matches(p, "DON'T"), (Pieces{"DON", "'", "T"}));
  EXPECT_EQ(matches(p, "a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(matches(p, "hello   "), (Pieces{"hello", "   "}));
  EXPECT_EQ(matches(p, "x\n\ny"), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(matches(p, "12345 3.14"), (Pieces{"12345", " 3", ".", "14"}));
  EXPECT_EQ(matches(p, "caf\u00e9 \u041f\u0440\u0438\u0432\u0435\u0442"),
            (Pieces{"caf\u00e9", " \u041f\u0440\u0438\u0432\u0435\u0442"}));
  EXPECT_EQ(matches(p, "!!! ok?!"), (Pieces{"!!!", " ok", "?!"}));
  EXPECT_EQ(matches(p, "\u4e2d\u6587 \U0001F44D"), (Pieces{"\u4e2d\u6587", " \U0001F44D"}));
  EXPECT_EQ(matches(p, ""), Pieces{});
}

TEST(Regex, Llama3Pattern) {
  EXPECT_EQ(matches(kLlama3, "DON'T stop"), (Pieces{"DON", "'T", " stop"}));
  EXPECT_EQ(matches(kLlama3, "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(matches(kLlama3, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(matches(kLlama3, "a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(matches(kLlama3, "x   y"), (Pieces{"x", "  ", " y"}));
  EXPECT_EQ(matches(kLlama3, "hello!!\n\nworld"), (Pieces{"hello", "!!\n\n", "world"}));
  EXPECT_EQ(matches(kLlama3, "  \n  x"), (Pieces{"  \n", " ", " x"}));
  EXPECT_EQ(matches(kLlama3, "(yes)"), (Pieces{"(yes", ")"}));
  EXPECT_EQ(matches(kLlama3, "it'S we'LL"), (Pieces{"it", "'S", " we", "'LL"}));
  EXPECT_EQ(matches(kLlama3, "\tx"), (Pieces{"\tx"}));
  EXPECT_EQ(matches(kLlama3, "end.  "), (Pieces{"end", ".", "  "}));
}

TEST(Regex, Qwen2Pattern) {
  EXPECT_EQ(matches(kQwen2, "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(matches(kQwen2, "v2.0"), (Pieces{"v", "2", ".", "0"}));
}

TEST(Regex, Semantics) {
  EXPECT_EQ(matches("a|ab", "ab"), Pieces{"a"});  // leftmost-first
  EXPECT_EQ(matches("ab|a", "ab"), Pieces{"ab"});
  EXPECT_EQ(matches("a+?", "aaa"), (Pieces{"a", "a", "a"}));  // lazy
  EXPECT_EQ(matches("a{2,3}", "aaaaaaa"), (Pieces{"aaa", "aaa"}));
  EXPECT_EQ(matches("a{2}", "aaaaa"), (Pieces{"aa", "aa"}));
  EXPECT_EQ(matches("a{2,}", "a aaaa"), Pieces{"aaaa"});
  EXPECT_EQ(matches("ax{,2}", "axxx"), Pieces{"axx"});  // Oniguruma's {,n}
  EXPECT_EQ(matches("x{y}", "x{y}"), Pieces{"x{y}"});   // not a quantifier
  EXPECT_EQ(matches("\\d+(?=px)", "10px 20em"), Pieces{"10"});
  EXPECT_EQ(matches("\\w+(?!\\d)", "ab1 cd"), (Pieces{"ab1", "cd"}));
  EXPECT_EQ(matches("(?:ab)+", "ababxab"), (Pieces{"abab", "ab"}));
  EXPECT_EQ(matches("(a|b)c", "acbc"), (Pieces{"ac", "bc"}));
  EXPECT_EQ(matches("[a-c]+", "abcdcba"), (Pieces{"abc", "cba"}));
  EXPECT_EQ(matches("[^a-c\\s]+", "abxy z"), (Pieces{"xy", "z"}));
  EXPECT_EQ(matches("[\\p{Lu}]+", "abCDe"), Pieces{"CD"});
  EXPECT_EQ(matches("\\P{L}+", "ab12!c"), Pieces{"12!"});
  EXPECT_EQ(matches("\\pN", "a1"), Pieces{"1"});
  EXPECT_EQ(matches("\\x41\\u00e9\\x{1F600}", "A\u00e9\U0001F600"), Pieces{"A\u00e9\U0001F600"});
  EXPECT_EQ(matches("(?i:abc)", "xAbC"), Pieces{"AbC"});
  EXPECT_EQ(matches("(?i)s", "\u017f"), Pieces{"\u017f"});  // long s folds to s
  EXPECT_EQ(matches("(?i:[a-c]+)", "ABCd"), Pieces{"ABC"});
  EXPECT_EQ(matches(".", "a\nb"), (Pieces{"a", "b"}));
  EXPECT_EQ(matches("^a|b$", "ab\nab"), (Pieces{"a", "b", "a", "b"}));
  EXPECT_EQ(matches("\\Aa", "aa"), Pieces{"a"});
  EXPECT_EQ(matches("[\\]\\-]+", "a]-b"), Pieces{"]-"});
  EXPECT_EQ(matches("[\u4e00-\u9fa5]+", "ab\u4e2d\u6587c"), Pieces{"\u4e2d\u6587"});
}

TEST(Regex, UnsupportedConstructsNameThePattern) {
  for (const char* pattern : {"(?<=a)b", "(?<!a)b", "\\bword", "\\p{Han}", "(a)\\1", "a++",
                              "[[:alpha:]]", "[a&&b]", "(?x)a"}) {
    try {
      Regex re(pattern);
      ADD_FAILURE() << "accepted " << pattern;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << pattern << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(pattern), std::string::npos) << e.what();
    }
  }
  for (const char* pattern : {"[abc", "(abc", "abc)", "*a", "a{3,1}b)", "\\x{zz}"}) {
    EXPECT_THROW(Regex re(pattern), Error) << pattern;
  }
}

TEST(Regex, LongInputsAreLinear) {
  Regex gpt2(kGpt2Pattern);
  Regex llama3(kLlama3);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "word ";
  text += std::string(50000, ' ') + "x" + std::string(50000, '\n') + std::string(50000, 'a');
  const auto start = std::chrono::steady_clock::now();
  const auto m1 = gpt2.find_all(text);
  const auto m2 = llama3.find_all(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(m1.back().second, text.size());
  EXPECT_EQ(m2.back().second, text.size());
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace rill
