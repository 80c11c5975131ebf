#include "engine/grammar/token_tables.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "engine/grammar/earley.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/subset_dfa.h"

namespace rill::grammar {

namespace {

void append_u64(std::string& key, uint64_t x) {
  key.append(reinterpret_cast<const char*>(&x), 8);
}

void append_varint(std::string& key, uint64_t x) {
  for (; x >= 0x80; x >>= 7) key.push_back(static_cast<char>((x & 0x7F) | 0x80));
  key.push_back(static_cast<char>(x));
}

struct SetHash {
  size_t operator()(const std::array<uint64_t, 4>& b) const {
    return static_cast<size_t>((b[0] * 0x9E3779B97F4A7C15ull) ^ (b[1] * 0xC2B2AE3D27D4EB4Full) ^
                               (b[2] * 0x165667B19E3779F9ull) ^ (b[3] * 0x27D4EB2F165667C5ull));
  }
};

// The grammar's distinct byte sets, numbered once per compile: each edge's set number, state by
// state (edges of state s: ids[first[s], first[s + 1])).
struct EdgeSets {
  std::vector<uint32_t> first, ids;
  uint32_t count = 0;
};

EdgeSets number_edge_sets(const CompiledGrammar& g) {
  EdgeSets e;
  std::unordered_map<std::array<uint64_t, 4>, uint32_t, SetHash> index;
  e.first.reserve(g.num_states() + 1);
  for (size_t s = 0; s < g.num_states(); ++s) {
    e.first.push_back(static_cast<uint32_t>(e.ids.size()));
    for (const ByteEdge& edge : g.state(static_cast<int32_t>(s)).bytes) {
      const auto [it, fresh] = index.try_emplace(edge.set.bits, e.count);
      if (fresh) ++e.count;
      e.ids.push_back(it->second);
    }
  }
  e.first.push_back(static_cast<uint32_t>(e.ids.size()));
  return e;
}

// The byte sets of one key, each an edge's set restricted to the bytes a walk can take there
// (Vocabulary::bytes_from): a set seen before in the key is written as its number in order of
// first appearance, so that a bounded repeat's chain of states (the same few sets over and over,
// up to the longest token's length: 129 bytes deep with Llama-3's runs) costs a few bytes an
// edge, not 40. A restricted set is numbered by its bytes (once per grammar set and level met,
// held in a map: a grammar's sets times the levels could be large), so equal sets share a name.
// Scratch of one build thread, reset per key.
class SetNames {
 public:
  explicit SetNames(const EdgeSets& sets) : sets_(sets) {}
  void begin() {
    if (++stamp_ == 0) {
      std::fill(stamp_of_.begin(), stamp_of_.end(), 0u);
      stamp_ = 1;
    }
    next_ = 0;
  }
  /// Edge `k` of state `s`, its set restricted to `allowed` (Vocabulary::bytes_from of level
  /// `level`): false, and nothing appended, when no byte of it remains.
  bool append(std::string& key, int32_t s, size_t k, const ByteSet& set, uint32_t level,
              const ByteSet& allowed) {
    const uint32_t id = sets_.ids[sets_.first[static_cast<size_t>(s)] + k];
    const auto [slot, fresh] =
        content_of_.try_emplace((static_cast<uint64_t>(id) << 32) | level, kNone);
    if (fresh) {
      ByteSet r;
      for (size_t i = 0; i < r.bits.size(); ++i) r.bits[i] = set.bits[i] & allowed.bits[i];
      if (!r.empty()) slot->second = intern(r);
    }
    const uint32_t c = slot->second;
    if (c == kNone) return false;
    if (stamp_of_[c] == stamp_) {
      append_varint(key, name_[c] + 2);
      return true;
    }
    stamp_of_[c] = stamp_;
    name_[c] = next_++;
    append_varint(key, 1);  // a literal set follows
    for (uint64_t w : contents_[c].bits) append_u64(key, w);
    return true;
  }

 private:
  static constexpr uint32_t kNone = ~0u;  // no byte of the set remains
  uint32_t intern(const ByteSet& r) {
    const auto [it, fresh] = index_.try_emplace(r.bits, static_cast<uint32_t>(contents_.size()));
    if (fresh) {
      contents_.push_back(r);
      stamp_of_.push_back(0);
      name_.push_back(0);
    }
    return it->second;
  }

  const EdgeSets& sets_;
  std::unordered_map<uint64_t, uint32_t> content_of_;  // (grammar set, level) -> content or kNone
  std::unordered_map<std::array<uint64_t, 4>, uint32_t, SetHash> index_;  // bytes -> content
  std::vector<ByteSet> contents_;
  std::vector<uint32_t> stamp_of_, name_;  // per content: named in this key when stamped
  uint32_t stamp_ = 0, next_ = 0;
};

// True when no state a walk from `start` can reach has a call edge: the walk is then a plain NFA
// simulation, without the Earley machinery. A walk takes, d bytes deep, only bytes of
// v.bytes_from(d), a set that shrinks with d: from a state first found d bytes deep, every byte
// it takes is in bytes_from(d), so only those edges count (none past the longest token). Then
// `key` describes everything that walk reads (TableCache): per state in breadth-first order its
// final flag and its edges so restricted (SetNames) with their targets' order numbers.
// `order` (per state, valid where seen == stamp) is scratch.
bool call_free(const CompiledGrammar& g, const Vocabulary& v, int32_t start,
               std::vector<uint32_t>& seen, std::vector<uint32_t>& order, uint32_t stamp,
               SetNames& sets, std::string& key) {
  key.clear();
  sets.begin();
  std::vector<int32_t> found{start};  // breadth-first: layer by layer
  seen[static_cast<size_t>(start)] = stamp;
  order[static_cast<size_t>(start)] = 0;
  size_t layer_begin = 0;
  // Layer d <= max_token_bytes(): bytes_from(max_token_bytes()) is empty, so no layer follows.
  for (size_t d = 0; layer_begin < found.size(); ++d) {
    const size_t layer_end = found.size();
    const ByteSet& allowed = v.bytes_from(d);
    const uint32_t level = v.bytes_from_level(d);
    for (size_t i = layer_begin; i < layer_end; ++i) {
      // Per state: final flag, per kept edge its byte set and its target's order number, then
      // 0 (no set is written as 0): a prefix-free, exact encoding.
      const AutomatonState& st = g.state(found[i]);
      if (!st.calls.empty()) return false;
      key.push_back(static_cast<char>(st.final ? 1 : 0));
      for (size_t k = 0; k < st.bytes.size(); ++k) {
        const ByteEdge& e = st.bytes[k];
        if (!sets.append(key, found[i], k, e.set, level, allowed)) continue;
        const auto t = static_cast<size_t>(e.target);
        if (seen[t] != stamp) {
          seen[t] = stamp;
          order[t] = static_cast<uint32_t>(found.size());
          found.push_back(e.target);
        }
        append_varint(key, order[t]);
      }
      append_varint(key, 0);
    }
    layer_begin = layer_end;
  }
  return true;
}

// A round's keys (word strings) -> their classes, numbered in order of first appearance: an
// open-addressing table over one arena of words, so a round allocates nothing once the first
// has sized it (a long token, Llama-3's runs of 100+ bytes, means as many rounds over every
// state). Exact: a hit compares the words.
class KeyClasses {
 public:
  /// Forget the keys; at most `n` distinct ones will follow.
  void reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    slots_.assign(cap, -1);
    entries_.clear();
    arena_.clear();
  }
  int32_t intern(const std::vector<uint64_t>& key) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint64_t w : key) h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    const size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      const int32_t c = slots_[i];
      if (c < 0) {
        slots_[i] = static_cast<int32_t>(entries_.size());
        entries_.push_back({h, arena_.size(), key.size()});
        arena_.insert(arena_.end(), key.begin(), key.end());
        return slots_[i];
      }
      const Entry& e = entries_[static_cast<size_t>(c)];
      if (e.hash == h && e.size == key.size() &&
          std::equal(key.begin(), key.end(), arena_.begin() + static_cast<ptrdiff_t>(e.at)))
        return c;
    }
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t hash;
    size_t at, size;  // its words: arena_[at, at + size)
  };
  std::vector<int32_t> slots_;  // a class, or -1
  std::vector<Entry> entries_;  // per class
  std::vector<uint64_t> arena_;
};

// Moore's partition refinement, bounded at the longest token: states in one class accept,
// refuse and leave their rule on exactly the same byte strings of that length, so they share
// one table (a repeated character class x{0,500} needs about max_token_bytes tables, not 500).
std::vector<int32_t> position_classes(const CompiledGrammar& g, size_t rounds,
                                      int32_t& num_classes) {
  const size_t n = g.num_states();
  std::vector<int32_t> cls(n), next(n);
  KeyClasses ids;  // a state's key -> its class in this round
  ids.reset(n);
  std::vector<uint64_t> key;
  for (size_t s = 0; s < n; ++s) {
    const AutomatonState& st = g.state(static_cast<int32_t>(s));
    key.assign(1, st.final ? 1 : 0);
    if (st.final)
      for (uint64_t w : g.follow(st.rule).bits) key.push_back(w);
    cls[s] = ids.intern(key);
  }
  size_t count = ids.size();
  // An edge is its byte set's number (the grammar's sets, numbered by their bytes) and its
  // target's class: one word, not five.
  const EdgeSets sets = number_edge_sets(g);
  std::vector<std::pair<int32_t, int32_t>> calls;
  for (size_t r = 0; r < rounds; ++r) {
    ids.reset(n);
    for (size_t s = 0; s < n; ++s) {
      const AutomatonState& st = g.state(static_cast<int32_t>(s));
      key.assign(1, static_cast<uint64_t>(cls[s]));
      for (size_t k = 0; k < st.bytes.size(); ++k)
        key.push_back((static_cast<uint64_t>(sets.ids[sets.first[s] + k]) << 32) |
                      static_cast<uint32_t>(cls[static_cast<size_t>(st.bytes[k].target)]));
      std::sort(key.begin() + 1, key.end());
      key.push_back(~uint64_t{0});  // no edge: set numbers are below 2^32 - 1
      calls.clear();
      for (const CallEdge& c : st.calls)
        calls.emplace_back(c.rule, cls[static_cast<size_t>(c.target)]);
      std::sort(calls.begin(), calls.end());
      for (auto [rule, t] : calls)
        key.push_back((static_cast<uint64_t>(rule) << 32) | static_cast<uint32_t>(t));
      next[s] = ids.intern(key);
    }
    cls.swap(next);
    if (ids.size() == count) break;  // stable
    count = ids.size();
  }
  num_classes = static_cast<int32_t>(count);
  return cls;
}

}  // namespace

std::shared_ptr<const PositionWalk> TableCache::find_walk(const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = walks_.find(key);
  return it == walks_.end() ? nullptr : it->second;
}

void TableCache::put_walk(const std::string& key, std::shared_ptr<const PositionWalk> walk) {
  std::lock_guard lock(mu_);
  if (walks_.size() < capacity_) walks_.emplace(key, std::move(walk));
}

std::shared_ptr<const PositionTable> TableCache::find_table(const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = tables_.find(key);
  return it == tables_.end() ? nullptr : it->second;
}

void TableCache::put_table(const std::string& key, std::shared_ptr<const PositionTable> table) {
  std::lock_guard lock(mu_);
  if (tables_.size() < capacity_) tables_.emplace(key, std::move(table));
}

size_t TableCache::size() const {
  std::lock_guard lock(mu_);
  return walks_.size();
}

namespace {

// The table of a call-free position keyed `key` (call_free), from the shared cache when it holds
// the table or the walk (another context of the same building block), else walked here. The
// table depends on the follow set only where a refused token continues after an exit
// (PositionWalk::exit_bytes): its key keeps that part, so contexts that differ elsewhere (a
// string followed by ']' or by '}') share it.
std::shared_ptr<const PositionTable> shared_table(const Vocabulary& v, SubsetDfa& dfa,
                                                  int32_t state, const std::string& key,
                                                  const ByteSet& follow, WalkScratch& scratch,
                                                  TableCache* shared) {
  std::shared_ptr<const PositionWalk> walk = shared ? shared->find_walk(key) : nullptr;
  if (!walk) {
    walk = std::make_shared<const PositionWalk>(walk_call_free(v, dfa, state, scratch));
    if (shared) shared->put_walk(key, walk);
  }
  std::string table_key = key;
  for (size_t i = 0; i < follow.bits.size(); ++i)
    append_u64(table_key, follow.bits[i] & walk->exit_bytes.bits[i]);
  if (shared)
    if (auto hit = shared->find_table(table_key)) return hit;
  auto table = std::make_shared<const PositionTable>(table_of(v, *walk, follow));
  if (shared) shared->put_table(table_key, table);
  return table;
}

}  // namespace

TokenTables::TokenTables(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
                         std::chrono::steady_clock::time_point started, TableCache* shared) {
  walkable_.assign(v.mask_words(), 0);
  for (int32_t id : v.sorted()) walkable_[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  int32_t num_classes = 0;
  const std::vector<int32_t> cls = position_classes(g, v.max_token_bytes() + 1, num_classes);
  std::vector<int32_t> table_of_class(static_cast<size_t>(num_classes), -1);
  index_.assign(g.num_states(), -1);
  // A hoisted repetition body (a long bounded string's character: one call per copy) ends after
  // every copy, so its own table leaves every longer token uncertain: the matcher would walk the
  // whole vocabulary through the parser at every step (5-7 ms a token with 128k tokens). Its
  // call sites' walks go through the call instead (Earley walks, a few per bounded repeat: its
  // call sites fall into about max_token_bytes + 2 position classes), which decides those
  // tokens here. A nullable body is not expanded (its call sites would be walked past it
  // without a byte: position classes count edges).
  expanded_.assign(g.num_rules(), 0);
  for (size_t r = 0; r < g.num_rules(); ++r)
    expanded_[r] = g.hoisted(static_cast<int32_t>(r)) && !g.nullable(static_cast<int32_t>(r));
  auto has_table = [&](const AutomatonState& st) {
    if (!st.bytes.empty()) return true;
    for (const CallEdge& c : st.calls)
      if (expanded_[static_cast<size_t>(c.rule)]) return true;
    return false;
  };
  std::vector<int32_t> reps;  // per table: the state whose walk builds it
  for (size_t s = 0; s < g.num_states(); ++s) {
    if (!has_table(g.state(static_cast<int32_t>(s)))) continue;
    int32_t& t = table_of_class[static_cast<size_t>(cls[s])];
    if (t < 0) {
      t = static_cast<int32_t>(reps.size());
      reps.push_back(static_cast<int32_t>(s));
    }
    index_[s] = t;
  }
  tables_.resize(reps.size());
  build_parallel(g, v, limits, started, reps, shallow_groups(g, v, reps), shared);
}

// Most tokens are short; a vocabulary with long runs (Llama-3: past 100 bytes) makes a bounded
// repeat's call sites fall into about max_token_bytes + 2 classes, each an Earley walk of the
// whole trie (some 30 ms with 128k tokens: seconds for one bounded string). Call sites whose
// classes agree to the depth where at most 1/64 of the tokens are longer share one walk to that
// depth, and each walks only the tokens under that walk's frontier (ShallowWalk).
TokenTables::ShallowGroups TokenTables::shallow_groups(const CompiledGrammar& g,
                                                       const Vocabulary& v,
                                                       const std::vector<int32_t>& reps) {
  ShallowGroups out;
  out.group_of.assign(reps.size(), -1);
  std::vector<size_t> longer(v.max_token_bytes() + 2, 0);  // tokens of more than d bytes
  for (int32_t id : v.sorted()) ++longer[v.bytes(id).size() - 1];
  for (size_t d = v.max_token_bytes(); d-- > 0;) longer[d] += longer[d + 1];
  size_t limit = 1;
  while (limit < v.max_token_bytes() && longer[limit] > v.sorted().size() / 64) ++limit;
  if (limit >= v.max_token_bytes()) return out;
  std::vector<size_t> call_sites;  // tables walked through an expanded rule's call
  for (size_t t = 0; t < reps.size(); ++t)
    if (g.state(reps[t]).bytes.empty()) call_sites.push_back(t);
  if (call_sites.size() < 2) return out;
  int32_t num_short = 0;
  const std::vector<int32_t> cls = position_classes(g, limit + 1, num_short);
  std::vector<int32_t> first(static_cast<size_t>(num_short), -1), size(first.size(), 0);
  for (size_t t : call_sites) {
    const auto c = static_cast<size_t>(cls[static_cast<size_t>(reps[t])]);
    if (first[c] < 0) first[c] = static_cast<int32_t>(t);
    ++size[c];
  }
  out.limit = limit;
  std::vector<int32_t> group_of_class(first.size(), -1);
  for (size_t t : call_sites) {
    const auto c = static_cast<size_t>(cls[static_cast<size_t>(reps[t])]);
    if (size[c] < 2) continue;
    if (group_of_class[c] < 0) {
      group_of_class[c] = static_cast<int32_t>(out.reps.size());
      out.reps.push_back(reps[static_cast<size_t>(first[c])]);
    }
    out.group_of[t] = group_of_class[c];
  }
  return out;
}

namespace {

// One build thread's parser, DFA and scratch.
struct BuildThread {
  BuildThread(const CompiledGrammar& g, const GrammarLimits& limits, const EdgeSets& sets)
      : parser(g, limits.max_earley_items_per_byte),
        dfa(g),
        seen(g.num_states(), 0),
        order(g.num_states(), 0),
        set_names(sets) {}
  EarleyParser parser;
  SubsetDfa dfa;
  WalkScratch scratch;
  std::vector<uint32_t> seen, order;
  uint32_t stamp = 0;
  std::string key;
  SetNames set_names;
};

}  // namespace

// The tables are independent walks of the vocabulary trie: they are built on several threads
// (each its own parser), taking the next table from a shared counter; the shallow walks they
// share are built first, the same way.
void TokenTables::build_parallel(const CompiledGrammar& g, const Vocabulary& v,
                                 const GrammarLimits& limits,
                                 std::chrono::steady_clock::time_point started,
                                 const std::vector<int32_t>& reps, const ShallowGroups& groups,
                                 TableCache* shared) {
  const EdgeSets edge_sets = number_edge_sets(g);
  auto run = [&](size_t count, auto&& body) {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::exception_ptr error;
    auto work = [&] {
      try {
        BuildThread bt(g, limits, edge_sets);
        for (size_t t = next++; t < count && !failed.load(); t = next++) {
          if (std::chrono::steady_clock::now() - started > limits.compile_timeout)
            fail("grammar compilation exceeded the time-out of " +
                 std::to_string(limits.compile_timeout.count()) + " ms");
          body(bt, t);
        }
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        failed.store(true);
      }
    };
    // A few dozen walks per thread at least: a small grammar is not worth the threads. A
    // shallow walk costs as much as a few dozen tables.
    const size_t hw = std::max(1u, std::thread::hardware_concurrency());
    const size_t threads = std::min({hw, kMaxBuildThreads, count / 32 + 1});
    std::vector<std::thread> pool;
    for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
  };
  std::vector<ShallowWalk> shallow(groups.reps.size());
  run(shallow.size(), [&](BuildThread& bt, size_t i) {
    shallow[i] = walk_earley_shallow(v, bt.parser, groups.reps[i], groups.limit, bt.scratch);
  });
  run(reps.size(), [&](BuildThread& bt, size_t t) {
    if (++bt.stamp == 0) {
      std::fill(bt.seen.begin(), bt.seen.end(), 0u);
      bt.stamp = 1;
    }
    const ByteSet& follow = g.follow(g.state(reps[t]).rule);
    if (call_free(g, v, reps[t], bt.seen, bt.order, bt.stamp, bt.set_names, bt.key)) {
      tables_[t] = shared_table(v, bt.dfa, reps[t], bt.key, follow, bt.scratch, shared);
      return;
    }
    PositionWalk w;
    const int32_t group = groups.group_of[t];
    if (group < 0 || !walk_earley_below(v, bt.parser, reps[t], shallow[static_cast<size_t>(group)],
                                        bt.scratch, w))
      w = walk_earley(v, bt.parser, reps[t], bt.scratch);
    tables_[t] = std::make_shared<const PositionTable>(table_of(v, w, follow));
  });
}

}  // namespace rill::grammar
