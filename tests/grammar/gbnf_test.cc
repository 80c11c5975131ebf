// GBNF: accepted sentences, and parse errors naming the line and column.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/grammar/gbnf.h"
#include "tests/grammar/test_util.h"

namespace rill::grammar {
namespace {

CompiledGrammar gbnf(const std::string& text) {
  return CompiledGrammar(
      build_grammar(ConstraintSpec{ConstraintKind::kGrammar, text, {}, "", ""}, {}), {},
      std::chrono::steady_clock::now());
}

std::string error_of(const std::string& text, const GrammarLimits& limits = {}) {
  try {
    Grammar g;
    parse_gbnf(g, text, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, ParsesLlamaCppSyntax) {
  const auto g = gbnf(R"(# a list of items
root   ::= "[" ws item ("," ws item)* "]"   # trailing comment
item   ::= [a-z]+ | "\"" [^"\\]* "\"" | num{1,2}
num    ::= [0-9]
ws     ::= [ \t\n]?
alt    ::= "x"
         | "y"
)");
  for (const std::string& ok : {"[ abc]", "[ab,\"q x\",7, 12]", "[\"é\"]"})
    EXPECT_TRUE(testing::complete(g, ok)) << ok;
  for (const std::string& bad : {"[]", "[ab,]", "[123]", "[\"a\\\"]"})
    EXPECT_FALSE(testing::complete(g, bad)) << bad;
  const auto dot = gbnf("root ::= . \"\\x41\\u00e9\" [^a-c]\n");
  EXPECT_TRUE(testing::complete(dot, "\nAéd"));
  EXPECT_FALSE(testing::complete(dot, "\nAéb"));
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\"\nfoo ::= bar\n"),
            "grammar: rule 'bar' is used but not defined");
  EXPECT_EQ(error_of("item ::= \"a\"\n"), "grammar: no 'root' rule");
  EXPECT_EQ(error_of("root ::= (\"a\"\n"), "grammar: line 1, column 10: unbalanced '('");
  EXPECT_EQ(error_of("root ::= \"a\")\n"), "grammar: line 1, column 13: unbalanced ')'");
  EXPECT_EQ(error_of("root ::= \"a\nb\"\n"),
            "grammar: line 1, column 10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= [a-\n"), "grammar: line 1, column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= \"\\q\"\n"), "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root = \"a\"\n"),
            "grammar: line 1, column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\"\n"),
            "grammar: line 2, column 1: rule 'root' defined twice");
  EXPECT_EQ(error_of("root ::= * \"a\"\n"), "grammar: line 1, column 10: '*' follows nothing");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}\n"),
            "grammar: line 1, column 13: repetition {m,n} with n < m");
  EXPECT_NE(error_of("root ::= \"a\"{99999}\n").find("limit of 10000"), std::string::npos);
  GrammarLimits few;
  few.max_rules = 2;
  EXPECT_NE(
      error_of("root ::= a b c\na ::= \"\"\nb ::= \"\"\nc ::= \"\"\n", few).find("limit of 2"),
      std::string::npos);
}

TEST(Gbnf, RefusesIllFormedUtf8) {
  // Overlong '/', a surrogate, U+110000: all refused where the literal holds them.
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80"})
    EXPECT_EQ(error_of(std::string("root ::= \"") + bad + "\"\n"),
              "grammar: line 1, column 11: invalid UTF-8")
        << ::testing::PrintToString(bad);
  EXPECT_EQ(error_of("root ::= \"\xF4\x8F\xBF\xBF\"\n"), "");
}

TEST(Gbnf, DeepNestingUsesNoRecursion) {
  const std::string text =
      "root ::= " + std::string(30000, '(') + "\"a\"" + std::string(30000, ')') + "\n";
  EXPECT_TRUE(testing::complete(gbnf(text), "a"));
}

TEST(Gbnf, LimitsOnAutomatonAndTime) {
  GrammarLimits small;
  small.max_automaton_states = 100;
  EXPECT_THROW(
      CompiledGrammar(
          build_grammar(
              ConstraintSpec{ConstraintKind::kGrammar, "root ::= [a-z]{500}\n", {}, "", ""}, small),
          small, std::chrono::steady_clock::now()),
      Error);
  GrammarLimits instant;
  instant.compile_timeout = std::chrono::milliseconds(0);
  try {
    testing::compile(ConstraintKind::kGrammar, "root ::= [a-z]{2000}\n",
                     testing::small_vocab(1, 100), instant);
    ADD_FAILURE() << "no time-out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("time-out"), std::string::npos) << e.what();
  }
  GrammarLimits tiny_text;
  tiny_text.max_spec_bytes = 10;
  EXPECT_THROW(
      build_grammar(
          ConstraintSpec{ConstraintKind::kGrammar, "root ::= \"aaaaaaaaaaa\"\n", {}, "", ""},
          tiny_text),
      Error);
}

TEST(Gbnf, RunTimeItemLimitStopsAmbiguousBlowUp) {
  // Highly ambiguous: every split of a run of 'a's is a parse; the per-byte item limit bounds
  // the work, and a byte that would exceed it is refused.
  GrammarLimits limits;
  limits.max_earley_items_per_byte = 64;
  const auto c =
      testing::compile(ConstraintKind::kGrammar, "root ::= x*\nx ::= \"a\" | \"aa\" | x x\n",
                       testing::small_vocab(2, 0), limits);
  GrammarMatcher m(c);
  int accepted = 0;
  for (int i = 0; i < 500; ++i) accepted += m.accept(2 + 'a') ? 1 : 0;
  EXPECT_GT(accepted, 0);
  EXPECT_LE(m.depth(), 500u);
}

}  // namespace
}  // namespace rill::grammar
