// Per automaton position, which tokens are accepted whatever the parser's stack holds (the
// approach XGrammar calls the adaptive token mask cache). For each automaton state with byte
// edges, the vocabulary trie is walked with an Earley parser started at that state alone:
//   accepted  - all the token's bytes are consumed without the state's rule ending first;
//   uncertain - the rule can end after k >= 1 of the token's bytes and byte k may follow the
//               rule somewhere in the grammar (CompiledGrammar::follow): whether the rest
//               (the suffix from byte k) fits depends on the parser stack, so the matcher checks
//               it at run time;
//   rejected  - the rest.
// An exit before the first byte (k = 0) is never recorded: the Earley closure of the matcher's
// current set already holds the completed rule's continuation, whose positions have tables of
// their own.
// Uncertain tokens are grouped by their suffix after the exit (ExitGroup): after a string's
// closing quote, thousands of tokens `abc",` share a handful of suffixes (`,`, `, "`, `}`), so
// the matcher parses each distinct suffix once from the rule's continuation, not each token.
// Each accepted set is stored in its smallest form: the ids, the rejected ids, or a bitset.
// The walks are independent and run on up to kMaxBuildThreads threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/position_walk.h"
#include "engine/grammar/vocabulary.h"

namespace rill::grammar {

/// Walks and tables of call-free positions (no rule call within the longest token's length),
/// shared by the grammars compiled against one vocabulary: such a walk depends only on the byte
/// automaton within that many bytes of the position and its final states, which together key it
/// exactly; its table adds the rule's follow set (position_walk.h). The JSON building blocks
/// (strings, numbers, whitespace, formats) recur in every schema, in a few contexts (followed by
/// ',', '}', ']'), so a new schema walks only what is new in it. Thread-safe. Once `capacity`
/// walks (or tables) are held, new ones are no longer kept: those held, such as a warm-up's,
/// stay (some cost far more to rebuild than a typical schema's new ones: the email format's
/// hundreds of walks).
class TableCache {
 public:
  explicit TableCache(size_t capacity = 4096) : capacity_(capacity) {}
  std::shared_ptr<const PositionWalk> find_walk(const std::string& key) const;
  void put_walk(const std::string& key, std::shared_ptr<const PositionWalk> walk);
  std::shared_ptr<const PositionTable> find_table(const std::string& key) const;
  void put_table(const std::string& key, std::shared_ptr<const PositionTable> table);
  /// Walks held.
  size_t size() const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const PositionWalk>> walks_;
  std::unordered_map<std::string, std::shared_ptr<const PositionTable>> tables_;
};

class TokenTables {
 public:
  /// `shared` (may be null): tables of call-free positions reused across grammars of `v`.
  TokenTables(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
              std::chrono::steady_clock::time_point started, TableCache* shared = nullptr);

  /// The table of automaton state `s`, or null when it has no byte edges.
  const PositionTable* at(int32_t s) const {
    const int32_t i = index_[static_cast<size_t>(s)];
    return i < 0 ? nullptr : tables_[static_cast<size_t>(i)].get();
  }
  /// Bitset of every token a table may accept (non-special, non-empty): a kComplement set is
  /// this minus its ids.
  std::span<const uint32_t> walkable() const { return walkable_; }
  size_t num_tables() const { return tables_.size(); }
  /// Rule r is expanded at its call sites: every state calling it has a table whose walk goes
  /// through the call, so an item of r predicted in the current set (origin = that set) adds
  /// nothing to the mask beyond its caller's table (GrammarMatcher::fill_mask skips it).
  bool expanded(int32_t r) const { return expanded_[static_cast<size_t>(r)] != 0; }

 private:
  /// Most threads one table build uses (the cores of a serving host are shared with the engine).
  static constexpr size_t kMaxBuildThreads = 8;
  /// Call-site tables (walked through an expanded rule) that share a ShallowWalk.
  struct ShallowGroups {
    size_t limit = 0;               // its depth
    std::vector<int32_t> reps;      // per group: the state its shallow walk starts from
    std::vector<int32_t> group_of;  // per table: its group, or -1 (walked whole)
  };
  static ShallowGroups shallow_groups(const CompiledGrammar& g, const Vocabulary& v,
                                      const std::vector<int32_t>& reps);
  void build_parallel(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
                      std::chrono::steady_clock::time_point started,
                      const std::vector<int32_t>& reps, const ShallowGroups& groups,
                      TableCache* shared);

  std::vector<int32_t> index_;  // per automaton state
  std::vector<std::shared_ptr<const PositionTable>> tables_;
  std::vector<uint32_t> walkable_;
  std::vector<uint8_t> expanded_;  // per rule
};

}  // namespace rill::grammar
