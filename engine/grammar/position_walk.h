// One position's walk of the vocabulary trie (TokenTables), split in two so that the expensive
// part is shared across the contexts a building block appears in:
//   - PositionWalk: what the walk finds whatever follows the position's rule: the accepted
//     tokens (packed, AcceptedSet) and the refusals, trie nodes the rule refuses after it could
//     have ended (the exit depths on their path): such tokens may continue after the rule;
//   - PositionTable: the walk's accepted set plus its uncertain tokens for one follow set (the
//     bytes that may follow the rule in this grammar): a refusal whose exit byte cannot follow
//     is dropped, the rest grouped by their suffix after the exit (ExitGroup).
// A string's table in the middle of an object (followed by ',') and at its end (by '}') share
// one walk: the walk costs a pass over the trie, the table a pass over the refusals.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/earley.h"
#include "engine/grammar/subset_dfa.h"
#include "engine/grammar/vocabulary.h"

namespace rill::grammar {

/// Tokens accepted at a position, in their smallest form: the ids, the others, or a bitset.
struct AcceptedSet {
  enum class Form : uint8_t { kList, kComplement, kBitset };
  Form form = Form::kList;
  std::vector<int32_t> ids;    // kList: accepted ids; kComplement: the walkable ids not accepted
  std::vector<uint32_t> bits;  // kBitset: accepted ids
};

/// Uncertain tokens of one position that continue with the same bytes after their rule ends.
struct ExitGroup {
  std::string suffix;        // the bytes after the rule's end (at least one)
  std::vector<int32_t> ids;  // token ids whose bytes are (a prefix in the rule) + suffix
};

struct PositionWalk {
  struct Refusal {
    uint32_t node;        // Vocabulary::trie() index: its tokens are refused by the rule
    uint32_t depth;       // bytes on the node's path (its byte included)
    uint32_t begin, end;  // depths[begin, end): where on its path the rule could have ended
  };
  std::shared_ptr<const AcceptedSet> accepted;
  std::vector<Refusal> refusals;
  std::vector<uint32_t> depths;  // exit depths d >= 1: the rule ended after d bytes
  ByteSet exit_bytes;  // the refused tokens' bytes right after an exit: table_of reads only these
                       // of a follow set, so the table's key keeps only these
};

/// Uncertain tokens of one position too many to list by suffix: every token under one trie node
/// (a refusal's), continuing after the rule's end at byte `exit`.
struct ExitSubtree {
  uint32_t node;   // Vocabulary::trie() index
  uint32_t depth;  // bytes on the node's path (its byte included)
  uint32_t exit;   // the rule ended after this many of them (1 <= exit < depth)
};

struct PositionTable {
  std::shared_ptr<const AcceptedSet> accepted;
  std::vector<ExitGroup> exits;       // sorted by suffix; a token with several exits is in several
  std::vector<ExitSubtree> subtrees;  // refusals of more than kMaxGroupedTokens tokens
};

/// A refusal of more tokens than this becomes an ExitSubtree (after a whitespace rule, thousands
/// of ` the`, ` to`, ... would otherwise each be a group of one); fewer are grouped by suffix
/// (at a string's end, thousands of `abc",` share a handful of suffixes).
inline constexpr uint32_t kMaxGroupedTokens = 16;

/// A trie node whose tokens the walk accepts up to a depth limit and that has longer tokens:
/// they are walked per position (walk_earley_below).
struct FrontierNode {
  uint32_t node;                // Vocabulary::trie() index, at depth ShallowWalk::limit
  std::vector<uint32_t> exits;  // exit depths on its path
};

/// The part of a walk within `limit` bytes, shared by positions that accept, refuse and leave
/// their rule on the same byte strings of that length (the call sites of a long bounded repeat
/// short of its bound's last `limit` copies): their walks differ only in the tokens under the
/// frontier, a few long runs and words.
struct ShallowWalk {
  size_t limit = 0;
  std::vector<uint32_t> accepted;  // sorted() indices of tokens of at most `limit` bytes
  std::vector<PositionWalk::Refusal> refusals;
  std::vector<uint32_t> depths;
  std::vector<FrontierNode> frontier;
};

/// Scratch of the walks, reused by one build thread.
struct WalkScratch {
  std::vector<uint32_t> accepted;  // sorted() indices, ascending
  PositionWalk out;
  std::vector<uint32_t> path_exits, exit_top, next;
  std::vector<int32_t> path;
};

/// The walk from automaton state `state` with the Earley parser (any position).
PositionWalk walk_earley(const Vocabulary& v, EarleyParser& p, int32_t state, WalkScratch& s);
/// The walk from `state` with the Earley parser to depth `limit` (its frontier left out).
ShallowWalk walk_earley_shallow(const Vocabulary& v, EarleyParser& p, int32_t state, size_t limit,
                                WalkScratch& s);
/// The walk from `state`, whose first `shallow.limit` bytes behave as those of the state
/// `shallow` was walked from: the shared part plus the walks under its frontier. False when a
/// frontier path is refused from `state` (not equivalent after all): walk it whole instead.
bool walk_earley_below(const Vocabulary& v, EarleyParser& p, int32_t state,
                       const ShallowWalk& shallow, WalkScratch& s, PositionWalk& out);
/// The walk from a call-free state (no rule call within the longest token) through `dfa`.
PositionWalk walk_call_free(const Vocabulary& v, SubsetDfa& dfa, int32_t state, WalkScratch& s);
/// The table of a walk whose rule is followed by the bytes of `follow`.
PositionTable table_of(const Vocabulary& v, const PositionWalk& w, const ByteSet& follow);

}  // namespace rill::grammar
