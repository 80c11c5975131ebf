#include "engine/grammar/token_tables.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <map>
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

// (sorted() index, exit offset k) of an uncertain token: its rule may end after k bytes.
using Exit = std::pair<uint32_t, uint32_t>;

// The exits along the walk's current trie path: depths d >= 1 where the rule had ended after d
// bytes and byte d may follow it. A node the rule refuses makes every token of its subtree
// uncertain once per exit on its path (none: rejected).
class PathExits {
 public:
  PathExits() : top_{0} {}
  /// Tokens [lo, hi) fail at this node; `here`: the node's own depth is an exit (or -1).
  void refuse(uint32_t lo, uint32_t hi, int64_t here, std::vector<Exit>& out) const {
    if (path_.empty() && here < 0) return;
    for (uint32_t i = lo; i < hi; ++i) {
      for (uint32_t k : path_) out.emplace_back(i, k);
      if (here >= 0) out.emplace_back(i, static_cast<uint32_t>(here));
    }
  }
  /// The walk descends into the node (`here` as in refuse()).
  void descend(int64_t here) {
    if (here >= 0) path_.push_back(static_cast<uint32_t>(here));
    top_.push_back(static_cast<uint32_t>(path_.size()));
  }
  void ascend() {
    top_.pop_back();
    path_.resize(top_.back());
  }

 private:
  std::vector<uint32_t> path_;
  std::vector<uint32_t> top_;  // per depth: path_.size()
};

// Classifies every walkable token for the position `state`: the sorted() indices of the
// accepted ones in increasing order, and the uncertain ones with their exits (the rest are
// rejected). A depth-first walk of the vocabulary trie; a byte the parser refuses settles the
// node's whole subtree at once.
void walk(const CompiledGrammar& g, const Vocabulary& v, EarleyParser& p, int32_t state,
          std::vector<uint32_t>& accepted, std::vector<Exit>& uncertain) {
  const ByteSet& follow = g.follow(g.state(state).rule);
  const auto& trie = v.trie();
  p.reset(state);
  PathExits exits;
  std::vector<uint32_t> next{trie[0].first_child};  // per depth: the next child to try
  while (!next.empty()) {
    const uint32_t c = next.back();
    if (c == 0) {
      next.pop_back();
      if (!next.empty()) {
        p.pop();
        exits.ascend();
      }
      continue;
    }
    const Vocabulary::TrieNode& n = trie[c];
    next.back() = n.next_sibling;
    const auto d = static_cast<int64_t>(next.size() - 1);  // bytes before n.byte
    const int64_t here = d > 0 && p.exited() && follow.test(n.byte) ? d : -1;
    if (!p.push(n.byte)) {
      exits.refuse(n.lo, n.hi, here, uncertain);
      continue;
    }
    exits.descend(here);
    for (uint32_t i = n.lo; i < n.lo + n.ends; ++i) accepted.push_back(i);
    next.push_back(n.first_child);
  }
}

void append_u64(std::string& key, uint64_t x) {
  key.append(reinterpret_cast<const char*>(&x), 8);
}

// True when no state within `depth` bytes of `start` (by byte edges; all in start's rule) has a
// call edge: the walk from `start` is then a plain NFA simulation, without the Earley machinery.
// Then `key` describes everything that walk reads (TableCache): the rule's follow set, and per
// state in breadth-first order its final flag and, within `depth`, its byte edges with their
// targets' order numbers. `order` (per state, valid where seen == stamp) is scratch.
bool call_free(const CompiledGrammar& g, int32_t start, size_t depth, std::vector<uint32_t>& seen,
               std::vector<uint32_t>& order, uint32_t stamp, std::string& key) {
  key.clear();
  for (uint64_t w : g.follow(g.state(start).rule).bits) append_u64(key, w);
  std::vector<int32_t> found{start};  // breadth-first: layer by layer
  seen[static_cast<size_t>(start)] = stamp;
  order[static_cast<size_t>(start)] = 0;
  size_t layer_begin = 0;
  for (size_t d = 0; layer_begin < found.size(); ++d) {
    const size_t layer_end = found.size();
    for (size_t i = layer_begin; i < layer_end; ++i) {
      const AutomatonState& st = g.state(found[i]);
      key.push_back(st.final ? 'F' : 'N');
      if (d > depth) continue;  // past the longest token: never entered by a walk
      if (!st.calls.empty()) return false;
      for (const ByteEdge& e : st.bytes) {
        const auto t = static_cast<size_t>(e.target);
        if (seen[t] != stamp) {
          seen[t] = stamp;
          order[t] = static_cast<uint32_t>(found.size());
          found.push_back(e.target);
        }
        for (uint64_t w : e.set.bits) append_u64(key, w);
        append_u64(key, order[t]);
      }
      key.push_back(';');
    }
    layer_begin = layer_end;
  }
  return true;
}

// walk() for a call-free start (call_free): the parser's item sets are sets of automaton states,
// advanced by their byte edges (SubsetDfa, shared by the thread's walks); the rule has ended
// where one of them is final. The hot loop of a cold compile (a string's interior visits every
// node of the vocabulary trie): one frame per depth, no other per-node allocation.
void walk_simple(const CompiledGrammar& g, const Vocabulary& v, int32_t state, SubsetDfa& dfa,
                 std::vector<uint32_t>& accepted, std::vector<Exit>& uncertain) {
  const ByteSet& follow = g.follow(g.state(state).rule);
  const auto& trie = v.trie();
  std::vector<int32_t> path;        // per depth: the DFA state after the path's bytes
  std::vector<uint32_t> next;       // per depth: the next trie child to try (0: none left)
  std::vector<uint32_t> exit_path;  // depths d >= 1 on the path where the rule may end (PathExits)
  std::vector<uint32_t> exit_top;   // per depth: exit_path.size()
  path.push_back(dfa.start(state, path));
  next.push_back(trie[0].first_child);
  exit_top.push_back(0);
  while (true) {
    const uint32_t c = next.back();
    if (c == 0) {
      next.pop_back();
      if (next.empty()) break;
      path.pop_back();
      exit_top.pop_back();
      exit_path.resize(exit_top.back());
      continue;
    }
    const Vocabulary::TrieNode& n = trie[c];
    next.back() = n.next_sibling;
    const size_t d = next.size() - 1;  // bytes before n.byte
    const bool here = d > 0 && dfa.final(path.back()) && follow.test(n.byte);
    const int32_t to = dfa.next(n.byte, path);
    if (to < 0) {
      if (here || !exit_path.empty())
        for (uint32_t i = n.lo; i < n.hi; ++i) {
          for (uint32_t k : exit_path) uncertain.emplace_back(i, k);
          if (here) uncertain.emplace_back(i, static_cast<uint32_t>(d));
        }
      continue;
    }
    if (here) exit_path.push_back(static_cast<uint32_t>(d));
    path.push_back(to);
    exit_top.push_back(static_cast<uint32_t>(exit_path.size()));
    for (uint32_t i = n.lo; i < n.lo + n.ends; ++i) accepted.push_back(i);
    next.push_back(n.first_child);
  }
}

// Moore's partition refinement, bounded at the longest token: states in one class accept,
// refuse and leave their rule on exactly the same byte strings of that length, so they share
// one table (a repeated character class x{0,500} needs about max_token_bytes tables, not 500).
std::vector<int32_t> position_classes(const CompiledGrammar& g, size_t rounds,
                                      int32_t& num_classes) {
  const size_t n = g.num_states();
  std::vector<int32_t> cls(n), next(n);
  std::map<std::vector<uint64_t>, int32_t> ids;
  auto follow_key = [&](const AutomatonState& st, std::vector<uint64_t>& key) {
    key.push_back(st.final ? 1 : 0);
    if (st.final)
      for (uint64_t w : g.follow(st.rule).bits) key.push_back(w);
  };
  for (size_t s = 0; s < n; ++s) {
    std::vector<uint64_t> key;
    follow_key(g.state(static_cast<int32_t>(s)), key);
    cls[s] = ids.emplace(std::move(key), static_cast<int32_t>(ids.size())).first->second;
  }
  size_t count = ids.size();
  for (size_t r = 0; r < rounds; ++r) {
    ids.clear();
    for (size_t s = 0; s < n; ++s) {
      const AutomatonState& st = g.state(static_cast<int32_t>(s));
      std::vector<uint64_t> key{static_cast<uint64_t>(cls[s])};
      std::vector<std::array<uint64_t, 5>> edges;
      for (const ByteEdge& e : st.bytes)
        edges.push_back({e.set.bits[0], e.set.bits[1], e.set.bits[2], e.set.bits[3],
                         static_cast<uint64_t>(cls[static_cast<size_t>(e.target)])});
      std::sort(edges.begin(), edges.end());
      for (const auto& e : edges) key.insert(key.end(), e.begin(), e.end());
      key.push_back(~uint64_t{0});
      std::vector<std::pair<int32_t, int32_t>> calls;
      for (const CallEdge& c : st.calls)
        calls.emplace_back(c.rule, cls[static_cast<size_t>(c.target)]);
      std::sort(calls.begin(), calls.end());
      for (auto [rule, t] : calls)
        key.push_back((static_cast<uint64_t>(rule) << 32) | static_cast<uint32_t>(t));
      next[s] = ids.emplace(std::move(key), static_cast<int32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (ids.size() == count) break;  // stable
    count = ids.size();
  }
  num_classes = static_cast<int32_t>(count);
  return cls;
}

// The uncertain tokens grouped by their suffix after the exit, sorted by suffix.
std::vector<ExitGroup> group_exits(const Vocabulary& v, const std::vector<Exit>& uncertain) {
  std::vector<ExitGroup> groups;
  std::unordered_map<std::string_view, size_t> index;  // views of the vocabulary's bytes
  const auto& sorted = v.sorted();
  for (auto [i, k] : uncertain) {
    const int32_t id = sorted[i];
    const std::string_view suffix = std::string_view(v.bytes(id)).substr(k);
    const auto [it, fresh] = index.emplace(suffix, groups.size());
    if (fresh) groups.push_back({std::string(suffix), {}});
    groups[it->second].ids.push_back(id);
  }
  std::sort(groups.begin(), groups.end(),
            [](const ExitGroup& a, const ExitGroup& b) { return a.suffix < b.suffix; });
  return groups;
}

// `accepted` holds sorted() indices in increasing order (the walk's order).
PositionTable pack(const Vocabulary& v, const std::vector<uint32_t>& accepted,
                   const std::vector<Exit>& uncertain) {
  PositionTable t;
  const auto& sorted = v.sorted();
  t.exits = group_exits(v, uncertain);
  const size_t list_bytes = accepted.size() * 4,
               complement_bytes = (sorted.size() - accepted.size()) * 4;
  const size_t bitset_bytes = v.mask_words() * 4;
  if (list_bytes <= complement_bytes && list_bytes <= bitset_bytes) {
    t.form = PositionTable::Form::kList;
    for (uint32_t i : accepted) t.ids.push_back(sorted[i]);
  } else if (complement_bytes <= bitset_bytes) {
    t.form = PositionTable::Form::kComplement;
    size_t k = 0;
    for (uint32_t i = 0; i < sorted.size(); ++i) {
      if (k < accepted.size() && accepted[k] == i)
        ++k;
      else
        t.ids.push_back(sorted[i]);
    }
  } else {
    t.form = PositionTable::Form::kBitset;
    t.bits.assign(v.mask_words(), 0);
    for (uint32_t i : accepted)
      t.bits[static_cast<size_t>(sorted[i]) >> 5] |= 1u << (sorted[i] & 31);
  }
  return t;
}

}  // namespace

std::shared_ptr<const PositionTable> TableCache::find(const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = tables_.find(key);
  return it == tables_.end() ? nullptr : it->second;
}

void TableCache::put(const std::string& key, std::shared_ptr<const PositionTable> table) {
  std::lock_guard lock(mu_);
  if (tables_.size() >= capacity_) tables_.clear();
  tables_.emplace(key, std::move(table));
}

size_t TableCache::size() const {
  std::lock_guard lock(mu_);
  return tables_.size();
}

TokenTables::TokenTables(const CompiledGrammar& g, const Vocabulary& v, const GrammarLimits& limits,
                         std::chrono::steady_clock::time_point started, TableCache* shared) {
  walkable_.assign(v.mask_words(), 0);
  for (int32_t id : v.sorted()) walkable_[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  int32_t num_classes = 0;
  const std::vector<int32_t> cls = position_classes(g, v.max_token_bytes() + 1, num_classes);
  std::vector<int32_t> table_of_class(static_cast<size_t>(num_classes), -1);
  index_.assign(g.num_states(), -1);
  std::vector<int32_t> reps;  // per table: the state whose walk builds it
  for (size_t s = 0; s < g.num_states(); ++s) {
    if (g.state(static_cast<int32_t>(s)).bytes.empty()) continue;
    int32_t& t = table_of_class[static_cast<size_t>(cls[s])];
    if (t < 0) {
      t = static_cast<int32_t>(reps.size());
      reps.push_back(static_cast<int32_t>(s));
    }
    index_[s] = t;
  }
  tables_.resize(reps.size());
  build_parallel(g, v, limits, started, reps, shared);
}

// The tables are independent walks of the vocabulary trie: they are built on several threads
// (each its own parser), taking the next table from a shared counter.
void TokenTables::build_parallel(const CompiledGrammar& g, const Vocabulary& v,
                                 const GrammarLimits& limits,
                                 std::chrono::steady_clock::time_point started,
                                 const std::vector<int32_t>& reps, TableCache* shared) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&] {
    try {
      EarleyParser parser(g, limits.max_earley_items_per_byte);
      SubsetDfa dfa(g);
      std::vector<uint32_t> accepted;
      std::vector<Exit> uncertain;
      std::vector<uint32_t> seen(g.num_states(), 0), order(g.num_states(), 0);
      uint32_t stamp = 0;
      std::string key;
      for (size_t t = next++; t < reps.size() && !failed.load(); t = next++) {
        if (std::chrono::steady_clock::now() - started > limits.compile_timeout)
          fail("grammar compilation exceeded the time-out of " +
               std::to_string(limits.compile_timeout.count()) + " ms");
        accepted.clear();
        uncertain.clear();
        if (++stamp == 0) {
          std::fill(seen.begin(), seen.end(), 0u);
          stamp = 1;
        }
        if (!call_free(g, reps[t], v.max_token_bytes(), seen, order, stamp, key)) {
          walk(g, v, parser, reps[t], accepted, uncertain);
          tables_[t] = std::make_shared<const PositionTable>(pack(v, accepted, uncertain));
          continue;
        }
        if (shared)
          if (auto hit = shared->find(key)) {
            tables_[t] = std::move(hit);
            continue;
          }
        walk_simple(g, v, reps[t], dfa, accepted, uncertain);
        tables_[t] = std::make_shared<const PositionTable>(pack(v, accepted, uncertain));
        if (shared) shared->put(key, tables_[t]);
      }
    } catch (...) {
      std::lock_guard lock(mu);
      if (!error) error = std::current_exception();
      failed.store(true);
    }
  };
  // A few dozen tables per thread at least: a small grammar is not worth the threads.
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min({hw, kMaxBuildThreads, reps.size() / 32 + 1});
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace rill::grammar
