// A lazily built subset automaton over a CompiledGrammar's byte edges, for the call-free token
// table walks (token_tables.cc): a DFA state is a set of automaton states, its transition on a
// byte computed on first use and then one array read. The sets a walk reaches recur across
// positions and across the vocabulary trie (a string's interior is the same few sets whatever
// came before), so one DFA serves all the walks of one build thread.
//
// Memory is bounded: past `max_states` DFA states (each 1 KiB of transitions) the DFA starts
// afresh, keeping only the states a walk still holds on its path (compact()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/compiled_grammar.h"

namespace rill::grammar {

class SubsetDfa {
 public:
  SubsetDfa(const CompiledGrammar& g, size_t max_states = 4096);

  /// The DFA state of the set {state}. `live`: DFA states the caller holds (renumbered in place
  /// when the DFA starts afresh).
  int32_t start(int32_t state, std::span<int32_t> live);
  /// The DFA state after byte `b` from `live.back()`, or -1 when no automaton state takes `b`.
  /// May renumber `live` (see start()).
  int32_t next(uint8_t b, std::span<int32_t> live) {
    const int32_t known = trans_[static_cast<size_t>(live.back()) * 256 + b];
    return known != kUnknown ? known : add_transition(b, live);
  }
  /// Some automaton state of `d` is final (its rule may end there).
  bool final(int32_t d) const { return final_[static_cast<size_t>(d)] != 0; }
  size_t num_states() const { return sets_.size(); }

 private:
  static constexpr int32_t kUnknown = -2;
  int32_t add_transition(uint8_t b, std::span<int32_t> live);
  int32_t intern(std::vector<int32_t>& set, std::span<int32_t> live);
  void compact(std::span<int32_t> live);

  const CompiledGrammar& g_;
  size_t max_states_;
  std::vector<std::vector<int32_t>> sets_;  // per DFA state: automaton states, ascending
  std::vector<uint8_t> final_;              // per DFA state
  std::vector<int32_t> trans_;              // [num_states, 256]: kUnknown, -1 (dead) or a state
  std::unordered_map<std::string, int32_t> ids_;  // a set's bytes -> its DFA state
  std::vector<uint32_t> seen_;                    // per automaton state: == stamp_ when added
  uint32_t stamp_ = 0;
  std::vector<int32_t> scratch_;
};

}  // namespace rill::grammar
