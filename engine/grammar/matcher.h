// The token-level matcher of one constrained sequence: an Earley parser over the bytes the
// sequence generated, and the mask of tokens that may come next.
//
// Mask of a step: the union of the accepted sets of the automaton positions in the parser's
// current set (precomputed, TokenTables), plus their uncertain tokens whose suffix after the
// rule's end the real parser accepts from that rule's continuation (each distinct suffix parsed
// once per (table, rule, origin), in sorted order with shared prefixes pushed once); EOS exactly
// when the grammar may end here; special tokens never.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/earley.h"
#include "engine/grammar/token_tables.h"
#include "engine/grammar/vocabulary.h"

namespace rill::grammar {

/// A constraint compiled against a vocabulary; immutable, shared by every sequence using it.
struct CompiledConstraint {
  std::shared_ptr<const Vocabulary> vocab;
  CompiledGrammar grammar;
  TokenTables tables;
  GrammarLimits limits;
  double compile_ms = 0;  // what compiling it took (the cache's hits cost nothing)
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledConstraint> c);

  /// Advances by one token. False (state unchanged) when the token is not allowed here. EOS is
  /// allowed when the grammar can end, and terminates the matcher.
  bool accept(int32_t token);
  /// Writes the allowed next tokens: bit (id & 31) of words[id >> 5]; `words` has
  /// Vocabulary::mask_words() entries. A terminated matcher allows nothing.
  void fill_mask(std::span<uint32_t> words);
  /// The bytes so far form a complete sentence of the grammar.
  bool can_end() const { return parser_.exited(); }
  /// EOS was accepted.
  bool terminated() const { return terminated_; }
  /// Bytes consumed.
  size_t depth() const { return parser_.depth(); }

 private:
  /// A table with exit groups, reached from an item of `rule` that began in set `origin`.
  struct ExitSource {
    const PositionTable* table;
    int32_t rule, origin;
    bool operator==(const ExitSource&) const = default;
  };
  void or_accepted(const AcceptedSet& t, std::span<uint32_t> words);
  void check_exits(const ExitSource& src, std::span<uint32_t> words);
  void check_subtree(const ExitSubtree& e, std::span<uint32_t> words);

  std::shared_ptr<const CompiledConstraint> c_;
  EarleyParser parser_;
  bool terminated_ = false;
  std::vector<uint8_t> before_;               // scratch: a complement table's bits before it
  std::vector<const PositionTable*> tables_;  // scratch: the distinct tables of the positions
  std::vector<ExitSource> sources_;           // scratch: the distinct exit sources
  std::vector<uint32_t> next_;                // scratch: check_subtree's per-depth next child
};

}  // namespace rill::grammar
