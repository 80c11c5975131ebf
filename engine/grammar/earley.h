// An Earley parser over a CompiledGrammar's byte automata: the parser state after each byte is
// a set of items (automaton state, origin set). It handles any context-free grammar (left
// recursion, ambiguity, nullable rules: Aycock and Horspool's prediction fix) without recursion:
// prediction, completion and scanning run over explicit work lists. push() adds one byte's set
// and pop() removes it, so a vocabulary walk can try a token's bytes and back out.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/grammar/compiled_grammar.h"

namespace rill::grammar {

struct Item {
  int32_t state = 0;
  int32_t origin = 0;  // index of the set where the item's rule started, or kRootOrigin
};

/// The origin of the item the parse starts from: its rule completing there ends the parse.
inline constexpr int32_t kRootOrigin = -1;

class EarleyParser {
 public:
  /// `max_items_per_set` bounds the work of one byte (GrammarLimits::max_earley_items_per_byte).
  EarleyParser(const CompiledGrammar& g, size_t max_items_per_set);

  /// Starts from automaton state `start` (with origin kRootOrigin).
  void reset(int32_t start);
  /// Consumes one byte: false (state unchanged) when no item can take it or the new set would
  /// exceed the item limit.
  bool push(uint8_t b);
  /// Adds a set holding what follows a completion of `rule` whose item began in set `origin`
  /// (origin's items waiting for it, advanced over it), closed: the parse after the rule ends
  /// part-way through a token. False (state unchanged) when nothing can follow (origin is
  /// kRootOrigin: the parse is over; or no item waits, or the item limit is exceeded).
  bool push_completion(int32_t rule, int32_t origin);
  /// Removes the last set (never the first).
  void pop();
  /// Sets beyond the first: bytes consumed.
  size_t depth() const { return starts_.size() - 1; }
  /// The start item's rule completed in the last set (the input so far is a complete parse).
  bool exited() const { return exited_.back() != 0; }
  std::span<const Item> last_set() const {
    return {items_.data() + starts_.back(), items_.size() - starts_.back()};
  }
  /// Items over all sets (all are kept: completions look back to their origin sets).
  size_t num_items() const { return items_.size(); }

 private:
  bool add(Item it);
  void close(int32_t set);
  void begin_set();
  bool end_set(size_t to);

  const CompiledGrammar& g_;
  size_t max_items_;
  std::vector<Item> items_;
  std::vector<uint32_t> starts_;  // set i: items_[starts_[i], starts_[i+1])
  std::vector<uint8_t> exited_;   // per set
  bool overflow_ = false;
  // Dedupe of the set under construction: open addressing, entries valid when stamped.
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 0;
};

}  // namespace rill::grammar
