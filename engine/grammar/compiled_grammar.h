// A grammar lowered to a recursive transition network: one epsilon-free byte automaton per
// rule, whose edges either consume one byte of a set or call another rule (a pushdown
// automaton's push). The Earley parser (earley.h) runs it; nullable rules and first/follow
// byte sets are precomputed here for the parser and the token tables.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

struct ByteEdge {
  ByteSet set;
  int32_t target = 0;
};

struct CallEdge {
  int32_t rule = 0;
  int32_t target = 0;
};

/// One automaton state (global numbering over all rules).
struct AutomatonState {
  int32_t rule = 0;
  bool final = false;  // the rule may end here
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
};

class CompiledGrammar {
 public:
  /// Lowers `g` (checked against `limits`; GrammarError for a limit or the time-out, counted
  /// from `started`).
  CompiledGrammar(const Grammar& g, const GrammarLimits& limits,
                  std::chrono::steady_clock::time_point started);

  const AutomatonState& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  size_t num_states() const { return states_.size(); }
  size_t num_rules() const { return rule_start_.size(); }
  int32_t rule_start(int32_t r) const { return rule_start_[static_cast<size_t>(r)]; }
  bool nullable(int32_t r) const { return nullable_[static_cast<size_t>(r)] != 0; }
  int32_t root_rule() const { return root_; }
  /// Bytes that may directly follow a completion of rule r, in any context (over-approximate).
  const ByteSet& follow(int32_t r) const { return follow_[static_cast<size_t>(r)]; }
  /// Rule r is the body of a repetition too large to inline (one call per copy: a long bounded
  /// string's characters), not a rule of the grammar.
  bool hoisted(int32_t r) const { return static_cast<size_t>(r) >= num_named_; }

 private:
  void compute_nullable();
  void compute_follow();

  std::vector<AutomatonState> states_;
  std::vector<int32_t> rule_start_;
  std::vector<uint8_t> nullable_;
  std::vector<ByteSet> follow_;
  int32_t root_ = 0;
  size_t num_named_ = 0;  // rules of the grammar; hoisted repetition bodies follow
};

}  // namespace rill::grammar
