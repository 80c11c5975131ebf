// SubsetDfa against a direct simulation of the automaton's sets: random byte strings through a
// regex's automaton give the same dead points and final flags, whatever the DFA's state cap
// (a small cap makes the DFA start afresh often, keeping and renumbering only the live path).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine/grammar/subset_dfa.h"
#include "tests/grammar/test_util.h"

namespace rill::grammar {
namespace {

// The set after `b` from `set`, by the automaton's byte edges (empty: dead).
std::set<int32_t> step(const CompiledGrammar& g, const std::set<int32_t>& set, uint8_t b) {
  std::set<int32_t> out;
  for (int32_t s : set)
    for (const ByteEdge& e : g.state(s).bytes)
      if (e.set.test(b)) out.insert(e.target);
  return out;
}

bool any_final(const CompiledGrammar& g, const std::set<int32_t>& set) {
  return std::any_of(set.begin(), set.end(), [&](int32_t s) { return g.state(s).final; });
}

TEST(SubsetDfa, MatchesSetSimulationUnderAnyCap) {
  const auto c = testing::compile(ConstraintKind::kRegex, R"((ab|a[bc]d|c)*[a-d]{2,5}(x|yz)?)",
                                  testing::small_vocab(1, 10));
  const CompiledGrammar& g = c->grammar;
  const int32_t start = g.rule_start(g.root_rule());
  for (size_t cap : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{8}, size_t{4096}}) {
    SubsetDfa dfa(g, cap);
    std::mt19937 rng(static_cast<uint32_t>(cap));
    for (int run = 0; run < 300; ++run) {
      std::vector<int32_t> path;
      path.push_back(dfa.start(start, path));
      std::vector<std::set<int32_t>> sets{{start}};
      for (int i = 0; i < 12; ++i) {
        const auto b = static_cast<uint8_t>("abcdxyz"[rng() % 7]);
        const std::set<int32_t> want = step(g, sets.back(), b);
        const int32_t got = dfa.next(b, path);
        ASSERT_EQ(got < 0, want.empty()) << "cap " << cap << " run " << run << " byte " << i;
        if (got < 0) break;
        path.push_back(got);
        sets.push_back(want);
        // Every state still on the path (renumbered or not) describes its set.
        for (size_t d = 0; d < path.size(); ++d)
          ASSERT_EQ(dfa.final(path[d]), any_final(g, sets[d])) << "cap " << cap << " depth " << d;
        if (rng() % 4 == 0 && path.size() > 1) {  // back up one byte, as a trie walk does
          path.pop_back();
          sets.pop_back();
        }
      }
    }
    if (cap <= 8) EXPECT_LE(dfa.num_states(), 14u);  // the live path at most, plus one
  }
}

}  // namespace
}  // namespace rill::grammar
