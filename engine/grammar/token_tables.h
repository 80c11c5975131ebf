// Per automaton position, which tokens are accepted whatever the parser's stack holds (the
// approach XGrammar calls the adaptive token mask cache). For each automaton state with byte
// edges, the vocabulary trie is walked with an Earley parser started at that state alone:
//   accepted  - all the token's bytes are consumed without the state's rule ending first;
//   uncertain - the rule can end part-way through the token and the next byte may follow the
//               rule somewhere in the grammar (CompiledGrammar::follow): the parser stack
//               decides, so the matcher checks these at run time;
//   rejected  - the rest.
// Each accepted set is stored in its smallest form: the ids, the rejected ids, or a bitset.
// The walks are independent and run on up to kMaxBuildThreads threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/vocabulary.h"

namespace rill::grammar {

struct PositionTable {
  enum class Form : uint8_t { kList, kComplement, kBitset };
  Form form = Form::kList;
  std::vector<int32_t> ids;         // kList: accepted ids; kComplement: rejected-or-uncertain ids
  std::vector<uint32_t> bits;       // kBitset: accepted ids
  std::vector<uint32_t> uncertain;  // indices into Vocabulary::sorted(), ascending
};

class TokenTables {
 public:
  TokenTables(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
              std::chrono::steady_clock::time_point started);

  /// The table of automaton state `s`, or null when it has no byte edges.
  const PositionTable* at(int32_t s) const {
    const int32_t i = index_[static_cast<size_t>(s)];
    return i < 0 ? nullptr : &tables_[static_cast<size_t>(i)];
  }
  /// Bitset of every token a table may accept (non-special, non-empty).
  std::span<const uint32_t> walkable() const { return walkable_; }
  size_t num_tables() const { return tables_.size(); }

 private:
  /// Most threads one table build uses (the cores of a serving host are shared with the engine).
  static constexpr size_t kMaxBuildThreads = 8;
  void build_parallel(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
                      std::chrono::steady_clock::time_point started,
                      const std::vector<int32_t>& reps);

  std::vector<int32_t> index_;  // per automaton state
  std::vector<PositionTable> tables_;
  std::vector<uint32_t> walkable_;
};

}  // namespace rill::grammar
