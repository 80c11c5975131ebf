// Regular expressions against Python's re (fixture made by tests/grammar/make_regex_cases.py)
// and the refusals of what the subset leaves out.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "tests/grammar/test_util.h"

namespace rill::grammar {
namespace {

TEST(Regex, MatchesPythonRe) {
  std::ifstream in(std::string(RILL_SOURCE_DIR) + "/tests/fixtures/grammar/regex_cases.json");
  ASSERT_TRUE(in) << "missing regex_cases.json";
  const auto cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 1000u);
  std::string last;
  std::unique_ptr<CompiledGrammar> g;
  for (const auto& c : cases) {
    const std::string p = c["pattern"];
    if (p != last) {
      ConstraintSpec s{ConstraintKind::kRegex, p, {}, "", ""};
      g = std::make_unique<CompiledGrammar>(build_grammar(s, {}), GrammarLimits{},
                                            std::chrono::steady_clock::now());
      last = p;
    }
    EXPECT_EQ(testing::complete(*g, c["text"]), c["match"].get<bool>())
        << "pattern " << p << " text '" << c["text"].get<std::string>() << "'";
  }
}

std::string refusal(const std::string& pattern) {
  try {
    build_grammar(ConstraintSpec{ConstraintKind::kRegex, pattern, {}, "", ""}, {});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(Regex, RefusesWhatTheSubsetLeavesOut) {
  EXPECT_NE(refusal(R"((a)\1)").find("backreferences"), std::string::npos);
  EXPECT_NE(refusal(R"(a(?=b))").find("lookahead"), std::string::npos);
  EXPECT_NE(refusal(R"((?<!a)b)").find("lookbehind"), std::string::npos);
  EXPECT_NE(refusal(R"(\bword)").find("word boundaries"), std::string::npos);
  EXPECT_NE(refusal(R"((?i)abc)").find("inline flags"), std::string::npos);
  EXPECT_NE(refusal(R"(a^b)").find("anchors"), std::string::npos);
  EXPECT_NE(refusal(R"(a$b)").find("anchors"), std::string::npos);
  EXPECT_NE(refusal(R"((ab)").find("missing ')'"), std::string::npos);
  EXPECT_NE(refusal(R"(ab))").find("unbalanced"), std::string::npos);
  EXPECT_NE(refusal(R"(*a)").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(refusal(R"(a**)").find("multiple repeat"), std::string::npos);
  EXPECT_NE(refusal(R"([a)").find("unterminated"), std::string::npos);
  EXPECT_NE(refusal(R"(a{5,2})").find("min repeat greater"), std::string::npos);
  EXPECT_NE(refusal(R"(a{100000})").find("limit"), std::string::npos);
  EXPECT_NE(refusal(R"(\q)").find("unknown escape"), std::string::npos);
}

// The pattern is decoded by engine/util/utf8.h: overlongs, surrogates and code points past
// U+10FFFF are refused, not turned into byte sequences no model can produce.
TEST(Regex, RefusesIllFormedUtf8) {
  for (const char* bad :
       {"a\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC3", "\x80"})
    EXPECT_NE(refusal(bad).find("invalid UTF-8"), std::string::npos)
        << ::testing::PrintToString(bad);
  EXPECT_EQ(refusal("\xF4\x8F\xBF\xBF\xED\x9F\xBF"), "");  // U+10FFFF, U+D7FF
}

TEST(Regex, DeepNestingUsesNoRecursion) {
  // 20,000 nested groups: parsed, lowered and printed on explicit stacks.
  const std::string p = std::string(20000, '(') + "a" + std::string(20000, ')');
  ConstraintSpec s{ConstraintKind::kRegex, p, {}, "", ""};
  const Grammar g = build_grammar(s, {});
  EXPECT_FALSE(g.to_string().empty());
  const CompiledGrammar cg(g, {}, std::chrono::steady_clock::now());
  EXPECT_TRUE(testing::complete(cg, "a"));
}

}  // namespace
}  // namespace rill::grammar
