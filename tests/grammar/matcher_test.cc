// Token masks against a brute-force check: for every token of a small vocabulary, is the
// generated text followed by the token's bytes still a prefix of some sentence? Random walks
// through the grammars exercise the precomputed tables, the uncertain-token checks and EOS.
#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "engine/grammar/matcher.h"
#include "tests/grammar/test_util.h"

namespace rill::grammar {
namespace {

using testing::compile;
using testing::small_vocab;

bool bit(const std::vector<uint32_t>& m, int32_t id) {
  return (m[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

// `favour_long`: three steps in four take the longest allowed token (reach a bound sooner).
void random_walks(const std::shared_ptr<const CompiledConstraint>& c, int walks, int steps,
                  uint32_t seed, bool favour_long = false) {
  const Vocabulary& v = *c->vocab;
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(c);
    std::string text;
    std::vector<uint32_t> mask(v.mask_words());
    for (int step = 0; step < steps; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < v.size(); ++id) {
        bool expect;
        if (v.is_eos(id))
          expect = testing::complete(c->grammar, text);
        else if (v.special(id) || v.bytes(id).empty())
          expect = false;
        else
          expect = testing::viable(c->grammar, text + v.bytes(id));
        ASSERT_EQ(bit(mask, id), expect)
            << "token " << id << " '" << v.bytes(id) << "' after '" << text << "'";
        if (expect && !v.is_eos(id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      int32_t t = allowed[rng() % allowed.size()];
      if (favour_long && rng() % 4 != 0)
        for (int32_t id : allowed)
          if (v.bytes(id).size() > v.bytes(t).size()) t = id;
      ASSERT_TRUE(m.accept(t));
      text += v.bytes(t);
    }
  }
}

TEST(GrammarMatcher, MasksMatchBruteForceJsonSchema) {
  const auto v = small_vocab(1, 200);
  random_walks(compile(ConstraintKind::kJsonSchema, R"({"type":"object","properties":{
      "a":{"type":"integer","minimum":-5,"maximum":120},
      "b":{"type":"string","maxLength":5},
      "c":{"type":"array","items":{"type":"boolean"},"maxItems":3},
      "d":{"enum":["x",1,null]}},"required":["a","d"]})",
                       v),
               3, 25, 7);
}

// Tables shared across schemas (TableCache): a schema compiled after others that share its
// building blocks (strings, numbers, bounded repeats, whitespace) reuses their tables, and its
// masks are still exact; a cache of one entry (full after its first table) changes nothing either.
TEST(GrammarMatcher, SharedTablesAcrossSchemasKeepMasksExact) {
  const auto v = small_vocab(4, 200);
  ConstraintCache cache(v, {});
  auto spec = [](const char* text) {
    ConstraintSpec s;
    s.kind = ConstraintKind::kJsonSchema;
    s.text = text;
    return s;
  };
  cache.get(spec(R"({"type":"object","properties":{"p":{"type":"string","maxLength":5},
      "q":{"type":"number"},"r":{"type":"array","items":{"type":"string"}}}})"));
  cache.get(spec(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":99}})"));
  const size_t before = cache.shared_tables();
  EXPECT_GT(before, 0u);
  const auto c = cache.get(spec(R"({"type":"object","properties":{
      "b":{"type":"string","maxLength":5},"n":{"type":"number"},
      "s":{"type":"array","items":{"type":"string"},"maxItems":2},
      "i":{"type":"integer","minimum":0,"maximum":99}},"required":["b","n","s","i"]})"));
  random_walks(c, 3, 30, 11);
  TableCache tiny(1);
  ConstraintSpec s = spec(R"({"type":"array","items":{"type":"string","maxLength":3}})");
  compile_constraint(s, v, {}, &tiny);
  random_walks(compile_constraint(s, v, {}, &tiny), 3, 20, 12);
}

// `base` with `more` tokens appended (ordinary, not special).
std::shared_ptr<const Vocabulary> with_tokens(const Vocabulary& base,
                                              const std::vector<std::string>& more) {
  std::vector<std::string> bytes;
  std::vector<uint8_t> special;
  for (int32_t id = 0; id < base.size(); ++id) {
    bytes.push_back(base.bytes(id));
    special.push_back(base.special(id) ? 1 : 0);
  }
  for (const std::string& t : more) bytes.push_back(t), special.push_back(0);
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                            std::vector<int32_t>{0});
}

// Long runs of one character (Llama-3's): past the longest other token a walk takes only the
// runs' characters (Vocabulary::bytes_from), so a call-free walk's key keeps only those edges
// there, and positions of inlined bounded repeats that differ only in other bytes that deep
// share a walk. Schemas and patterns that differ just there, through one cache and alone, keep
// exact masks.
TEST(GrammarMatcher, LongRunsSharedWalksMatchBruteForce) {
  std::vector<std::string> runs_of;
  for (char c : {' ', 'a', '-'})
    for (size_t n : {9u, 14u, 20u, 26u}) runs_of.emplace_back(n, c);
  const auto v = with_tokens(*small_vocab(13, 120), runs_of);
  ASSERT_EQ(v->max_token_bytes(), 26u);
  ByteSet runs;
  for (char c : {' ', 'a', '-'}) runs.set(static_cast<uint8_t>(c));
  EXPECT_TRUE(v->bytes_from(20) == runs);
  EXPECT_TRUE(v->bytes_from(26).empty());
  EXPECT_TRUE(v->bytes_from(0).test('{'));
  ConstraintCache cache(v, {});
  const std::vector<std::pair<ConstraintKind, const char*>> specs = {
      {ConstraintKind::kJsonSchema, R"({"type":"object","properties":{
          "s":{"type":"string","maxLength":18},"e":{"type":"string","format":"email"}},
          "required":["s","e"]})"},
      {ConstraintKind::kJsonSchema,
       R"({"type":"array","items":{"type":"string","maxLength":21},"maxItems":3})"},
      {ConstraintKind::kRegex, R"([ab\-]{0,24}c)"},
      {ConstraintKind::kRegex, R"([a\-]{0,24}c)"},
      {ConstraintKind::kRegex, R"((a|-|bx){3,22})"}};
  uint32_t seed = 31;
  for (const auto& [kind, text] : specs) {
    ConstraintSpec s;
    s.kind = kind;
    s.text = text;
    random_walks(cache.get(s), 2, 25, seed++, true);
    random_walks(compile(kind, text, v), 1, 25, seed++, true);
  }
}

// One rule's walk in grammars where different bytes follow it: its tables share a key only
// where the follow sets agree on the bytes refused tokens continue with after an exit
// (PositionWalk::exit_bytes), so `b)` is uncertain after `s` in the second grammar, not refused
// as in the first.
TEST(GrammarMatcher, TablesSharedAcrossFollowSetsMatchBruteForce) {
  const auto v = with_tokens(*small_vocab(14, 60), {"ab>", "b)", "a>", "c)", "ab)>", "a)b",
                                                     "bc>x", "c))", "a]", "b>)"});
  ConstraintCache cache(v, {});
  uint32_t seed = 41;
  for (const char* text : {"root ::= \"<\" s \">\"\ns ::= [a-c]{0,5}",
                           "root ::= \"(\" s \")\"\ns ::= [a-c]{0,5}",
                           "root ::= \"(\" s \")\" | \"[\" s \"]\"\ns ::= [a-c]{0,5}"}) {
    ConstraintSpec s;
    s.kind = ConstraintKind::kGrammar;
    s.text = text;
    random_walks(cache.get(s), 4, 8, seed++);
  }
}

TEST(GrammarMatcher, MasksMatchBruteForceJsonObject) {
  random_walks(compile(ConstraintKind::kJsonObject, "", small_vocab(2, 200)), 3, 25, 8);
}

TEST(GrammarMatcher, MasksMatchBruteForceRegex) {
  const auto v = small_vocab(3, 200);
  random_walks(compile(ConstraintKind::kRegex, R"((ab|c)*d{2,3}[x-z]?)", v), 6, 12, 9);
  random_walks(compile(ConstraintKind::kRegex, R"([^a]{0,3}b|é+)", v), 6, 8, 10);
}

TEST(GrammarMatcher, MasksMatchBruteForceRecursiveGbnf) {
  const auto v = small_vocab(4, 200);
  random_walks(
      compile(ConstraintKind::kGrammar, "root ::= \"(\" root \")\" | \"x\" root | \"\"\n", v), 6,
      12, 11);
  random_walks(compile(ConstraintKind::kGrammar,
                       "root ::= root \"a\" | \"b\" | item\nitem ::= [0-9]+ \",\"?\n", v),
               6, 12, 12);
}

// Tokens that end several rules at once at different stack depths (`1]],`, `"],["`): their
// exit groups are parsed from each rule's continuation (exits after the first byte), and an
// exit before the first byte is left to the continuation's own positions. Ambiguity (`pair`
// reachable two ways) puts one rule's items at several origins in one set.
TEST(GrammarMatcher, TokensSpanningSeveralRuleEndsMatchBruteForce) {
  std::vector<std::string> bytes{""};
  std::vector<uint8_t> special{1};
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b)), special.push_back(0);
  const std::string alphabet = "[]\",a1 ";
  std::mt19937 rng(21);
  for (int i = 0; i < 600; ++i) {
    std::string t;
    const int n = 2 + static_cast<int>(rng() % 7);
    for (int k = 0; k < n; ++k) t += alphabet[rng() % alphabet.size()];
    bytes.push_back(t);
    special.push_back(0);
  }
  // Refusals of many tokens (ExitSubtree, past kMaxGroupedTokens): `1]...` after a number,
  // `a"...` inside a string.
  for (const std::string prefix : {"1]", "a\""})
    for (int i = 0; i < 60; ++i) {
      std::string t = prefix;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
        t += alphabet[rng() % alphabet.size()];
      bytes.push_back(t);
      special.push_back(0);
    }
  const auto v = std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                                    std::vector<int32_t>{0});
  random_walks(compile(ConstraintKind::kGrammar,
                       "root ::= \"[\" list \"]\"\n"
                       "list ::= item (\",\" \" \"? item)* | \"\"\n"
                       "item ::= str | num | \"[\" list \"]\" | pair | num num | num \"1a\"\n"
                       "pair ::= str \",\" num | str \",\" item\n"
                       "str ::= \"\\\"\" [a]* \"\\\"\"\n"
                       "num ::= [1]+\n",
                       v),
               8, 14, 22);
}

// Long bounded repeats (a child too large to inline that often is hoisted into a rule of its
// own, one call per copy, and expanded at its call sites): walks that favour long tokens reach
// the bound, so masks are checked far from it, near it and at it, with tokens longer than the
// count left. The brute force keeps one parser of the text (no tables) and tries each token on
// it, so thousands of steps stay cheap.
void bounded_walks(const std::shared_ptr<const CompiledConstraint>& c, int walks, int steps,
                   uint32_t seed) {
  const Vocabulary& v = *c->vocab;
  ASSERT_TRUE(c->grammar.hoisted(static_cast<int32_t>(c->grammar.num_rules() - 1)))
      << "the repetition was inlined: the case no longer tests hoisted bodies";
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(c);
    EarleyParser p(c->grammar, 1 << 16);
    p.reset(c->grammar.rule_start(c->grammar.root_rule()));
    std::vector<uint32_t> mask(v.mask_words());
    size_t text = 0;
    for (int step = 0; step < steps; ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < v.size(); ++id) {
        bool expect = false;
        if (v.is_eos(id)) {
          expect = p.exited();
        } else if (!v.special(id) && !v.bytes(id).empty()) {
          const std::string& b = v.bytes(id);
          size_t k = 0;
          while (k < b.size() && p.push(static_cast<uint8_t>(b[k]))) ++k;
          expect = k == b.size();
          for (; k > 0; --k) p.pop();
        }
        ASSERT_EQ(bit(mask, id), expect) << "token " << id << " '" << v.bytes(id) << "' after "
                                         << text << " bytes, walk " << w << " step " << step;
        if (expect && !v.is_eos(id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      int32_t t = allowed[rng() % allowed.size()];
      if (rng() % 4 != 0)  // mostly the longest: reach the bound within the steps
        for (int32_t id : allowed)
          if (v.bytes(id).size() > v.bytes(t).size()) t = id;
      ASSERT_TRUE(m.accept(t));
      for (char b : v.bytes(t)) ASSERT_TRUE(p.push(static_cast<uint8_t>(b)));
      text += v.bytes(t).size();
    }
  }
}

// small_vocab plus runs longer than the last few copies of a bound.
std::shared_ptr<const Vocabulary> runs_vocab(uint32_t seed) {
  const auto base = small_vocab(seed, 120);
  std::vector<std::string> bytes;
  std::vector<uint8_t> special;
  for (int32_t id = 0; id < base->size(); ++id) {
    bytes.push_back(base->bytes(id));
    special.push_back(base->special(id) ? 1 : 0);
  }
  for (const char* t : {"ab", "abab", "cdcd", "abcd", "abx", "cx", "ax\"", "a\"}", "a\",", "é\"",
                        "\\n", "\\u00e9", "\" }", "\"}"})
    bytes.emplace_back(t), special.push_back(0);
  for (size_t n : {3u, 7u, 12u, 16u}) bytes.emplace_back(n, 'a'), special.push_back(0);
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special),
                                            std::vector<int32_t>{0});
}

TEST(GrammarMatcher, LongBoundedStringsMatchBruteForce) {
  const auto v = runs_vocab(11);
  // Exactly n characters (the serving check's body), a range, only a maximum, and a bounded
  // string followed by another property.
  bounded_walks(compile(ConstraintKind::kJsonSchema,
                        R"({"type":"string","minLength":1000,"maxLength":1000})", v),
                2, 400, 21);
  bounded_walks(compile(ConstraintKind::kJsonSchema,
                        R"({"type":"string","minLength":990,"maxLength":1003})", v),
                2, 400, 22);
  bounded_walks(compile(ConstraintKind::kJsonSchema, R"({"type":"string","maxLength":1200})", v), 2,
                400, 23);
  bounded_walks(compile(ConstraintKind::kJsonSchema, R"({"type":"object","properties":{
      "body":{"type":"string","minLength":1000,"maxLength":1001},"n":{"type":"integer"}},
      "required":["body","n"]})",
                        v),
                2, 400, 24);
}

TEST(GrammarMatcher, LongBoundedRegexRepeatsMatchBruteForce) {
  const auto v = runs_vocab(12);
  // A sequence child (hoisted, not nullable: expanded) and a nullable one (not expanded).
  bounded_walks(compile(ConstraintKind::kRegex, R"((ab|cd|a){5200,5204}x?)", v), 2, 900, 25);
  bounded_walks(compile(ConstraintKind::kRegex, R"((a?b?){5000}c)", v), 2, 900, 26);
}

TEST(GrammarMatcher, EosOnlyWhenComplete) {
  const auto c = compile(ConstraintKind::kRegex, "ab", small_vocab(5, 0));
  GrammarMatcher m(c);
  EXPECT_FALSE(m.accept(0));  // EOS before the end
  EXPECT_FALSE(m.accept(1));  // another special token: never
  EXPECT_TRUE(m.accept(2 + 'a'));
  EXPECT_FALSE(m.accept(2 + 'a'));
  EXPECT_TRUE(m.accept(2 + 'b'));
  std::vector<uint32_t> mask(c->vocab->mask_words());
  m.fill_mask(mask);
  for (int32_t id = 0; id < c->vocab->size(); ++id) EXPECT_EQ(bit(mask, id), id == 0) << id;
  EXPECT_TRUE(m.accept(0));
  EXPECT_TRUE(m.terminated());
  m.fill_mask(mask);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
}

TEST(GrammarMatcher, ChoiceAndAffixes) {
  ConstraintSpec s;
  s.kind = ConstraintKind::kChoice;
  s.choices = {"yes", "no", "maybe"};
  s.prefix = "<";
  s.suffix = ">";
  const auto c = compile_constraint(s, small_vocab(6, 0), {});
  for (const std::string& t : {"<yes>", "<no>", "<maybe>"})
    EXPECT_TRUE(testing::complete(c->grammar, t)) << t;
  for (const std::string& t : {"yes", "<ye>", "<no", "<yesno>"})
    EXPECT_FALSE(testing::complete(c->grammar, t)) << t;
}

// A full TableCache keeps what it holds (a warm-up's tables) and takes nothing new.
TEST(TableCache, KeepsItsTablesWhenFull) {
  TableCache tiny(1);
  tiny.put_walk("a", std::make_shared<const PositionWalk>());
  tiny.put_walk("b", std::make_shared<const PositionWalk>());
  tiny.put_table("a", std::make_shared<const PositionTable>());
  tiny.put_table("b", std::make_shared<const PositionTable>());
  EXPECT_EQ(tiny.size(), 1u);
  EXPECT_NE(tiny.find_walk("a"), nullptr);
  EXPECT_EQ(tiny.find_walk("b"), nullptr);
  EXPECT_NE(tiny.find_table("a"), nullptr);
  EXPECT_EQ(tiny.find_table("b"), nullptr);
}

// The warm-up builds the building blocks' tables once (a stop flag already set builds none); a
// schema of those blocks compiled afterwards builds few of its own and its masks stay exact.
TEST(ConstraintCache, WarmUpBuildsTheBuildingBlocksOnce) {
  const auto v = small_vocab(5, 200);
  ConstraintCache cache(v, {});
  const std::atomic<bool> stop{true};
  EXPECT_EQ(cache.warm_up(&stop), 0u);
  const size_t warmed = cache.warm_up();
  EXPECT_GT(warmed, 300u);
  EXPECT_EQ(cache.warm_up(), warmed);  // nothing new the second time
  ConstraintSpec s;
  s.kind = ConstraintKind::kJsonSchema;
  s.text = R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},
      "when":{"type":"string","format":"date-time"},"n":{"type":"number"},
      "tags":{"type":"array","items":{"type":"string"}}},"required":["name","when","n","tags"]})";
  const auto c = cache.get(s);
  EXPECT_LT(cache.shared_tables() - warmed, c->tables.num_tables() / 2)
      << "a schema of warmed-up blocks should mostly reuse their tables";
  random_walks(c, 2, 30, 13);
}

TEST(ConstraintCache, HitsShareTheCompiledConstraint) {
  ConstraintCache cache(small_vocab(7, 10), {}, 2);
  ConstraintSpec a{ConstraintKind::kRegex, "a+", {}, "", ""};
  ConstraintSpec b{ConstraintKind::kRegex, "b+", {}, "", ""};
  ConstraintSpec c{ConstraintKind::kRegex, "c+", {}, "", ""};
  const auto first = cache.get(a);
  EXPECT_EQ(cache.get(a).get(), first.get());
  cache.get(b);
  cache.get(c);  // evicts a (least recently used)
  EXPECT_NE(cache.get(a).get(), first.get());
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 4u);
}

}  // namespace
}  // namespace rill::grammar
