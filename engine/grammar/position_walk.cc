#include "engine/grammar/position_walk.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace rill::grammar {

namespace {

// The accepted sorted() indices (ascending) in their smallest form.
std::shared_ptr<const AcceptedSet> pack(const Vocabulary& v,
                                        const std::vector<uint32_t>& accepted) {
  auto t = std::make_shared<AcceptedSet>();
  const auto& sorted = v.sorted();
  const size_t list_bytes = accepted.size() * 4,
               complement_bytes = (sorted.size() - accepted.size()) * 4;
  const size_t bitset_bytes = v.mask_words() * 4;
  if (list_bytes <= complement_bytes && list_bytes <= bitset_bytes) {
    t->form = AcceptedSet::Form::kList;
    for (uint32_t i : accepted) t->ids.push_back(sorted[i]);
  } else if (complement_bytes <= bitset_bytes) {
    t->form = AcceptedSet::Form::kComplement;
    size_t k = 0;
    for (uint32_t i = 0; i < sorted.size(); ++i) {
      if (k < accepted.size() && accepted[k] == i)
        ++k;
      else
        t->ids.push_back(sorted[i]);
    }
  } else {
    t->form = AcceptedSet::Form::kBitset;
    t->bits.assign(v.mask_words(), 0);
    for (uint32_t i : accepted)
      t->bits[static_cast<size_t>(sorted[i]) >> 5] |= 1u << (sorted[i] & 31);
  }
  return t;
}

// The bytes right after an exit, over the refusals: the only bytes table_of reads of a follow set.
ByteSet exit_bytes(const Vocabulary& v, const PositionWalk& w) {
  ByteSet out;
  for (const PositionWalk::Refusal& r : w.refusals) {
    const std::string& path = v.bytes(v.sorted()[v.trie()[r.node].lo]);
    for (uint32_t k = r.begin; k < r.end; ++k) out.set(static_cast<uint8_t>(path[w.depths[k]]));
  }
  return out;
}

// The depth-first walk shared by both walkers, under trie node `root` (its path of `root_depth`
// bytes already consumed by the walker, the exits on it in s.path_exits): appends to s.accepted,
// s.out.refusals and s.out.depths. `Step` advances the walker by a byte (false: refused) and
// `Back` undoes one step; `ended()` says the rule may end at the current depth. One frame per
// depth; a refused node settles its whole subtree at once. With `frontier`, a node accepted at
// depth `limit` with children is recorded there instead of walked below.
template <class Walker>
void walk_nodes(const Vocabulary& v, Walker& w, WalkScratch& s, uint32_t root, size_t root_depth,
                size_t limit, std::vector<FrontierNode>* frontier) {
  const auto& trie = v.trie();
  s.exit_top.assign(1, static_cast<uint32_t>(s.path_exits.size()));
  s.next.assign(1, trie[root].first_child);
  while (true) {
    const uint32_t c = s.next.back();
    if (c == 0) {
      s.next.pop_back();
      if (s.next.empty()) break;
      w.back();
      s.exit_top.pop_back();
      s.path_exits.resize(s.exit_top.back());
      continue;
    }
    const Vocabulary::TrieNode& n = trie[c];
    s.next.back() = n.next_sibling;
    const size_t d = root_depth + s.next.size() - 1;  // bytes before n.byte
    const bool here = d > 0 && w.ended();
    if (!w.step(n.byte)) {
      if (here || !s.path_exits.empty()) {
        const auto begin = static_cast<uint32_t>(s.out.depths.size());
        s.out.depths.insert(s.out.depths.end(), s.path_exits.begin(), s.path_exits.end());
        if (here) s.out.depths.push_back(static_cast<uint32_t>(d));
        s.out.refusals.push_back(
            {c, static_cast<uint32_t>(d + 1), begin, static_cast<uint32_t>(s.out.depths.size())});
      }
      continue;
    }
    if (here) s.path_exits.push_back(static_cast<uint32_t>(d));
    for (uint32_t i = n.lo; i < n.lo + n.ends; ++i) s.accepted.push_back(i);
    if (frontier != nullptr && d + 1 == limit && n.first_child != 0) {
      frontier->push_back({c, s.path_exits});
      s.path_exits.resize(s.exit_top.back());
      w.back();
      continue;
    }
    s.exit_top.push_back(static_cast<uint32_t>(s.path_exits.size()));
    s.next.push_back(n.first_child);
  }
}

template <class Walker>
PositionWalk walk_trie(const Vocabulary& v, Walker& w, WalkScratch& s) {
  s.accepted.clear();
  s.out = PositionWalk{};
  s.path_exits.clear();
  walk_nodes(v, w, s, 0, 0, SIZE_MAX, nullptr);
  s.out.accepted = pack(v, s.accepted);
  s.out.exit_bytes = exit_bytes(v, s.out);
  return std::move(s.out);
}

struct EarleyWalker {
  EarleyParser& p;
  bool ended() const { return p.exited(); }
  bool step(uint8_t b) { return p.push(b); }
  void back() { p.pop(); }
};

struct DfaWalker {
  SubsetDfa& dfa;
  std::vector<int32_t>& path;  // per depth: the DFA state after the path's bytes
  bool ended() const { return dfa.final(path.back()); }
  bool step(uint8_t b) {
    const int32_t to = dfa.next(b, path);
    if (to < 0) return false;
    path.push_back(to);
    return true;
  }
  void back() { path.pop_back(); }
};

}  // namespace

PositionWalk walk_earley(const Vocabulary& v, EarleyParser& p, int32_t state, WalkScratch& s) {
  p.reset(state);
  EarleyWalker w{p};
  return walk_trie(v, w, s);
}

ShallowWalk walk_earley_shallow(const Vocabulary& v, EarleyParser& p, int32_t state, size_t limit,
                                WalkScratch& s) {
  p.reset(state);
  EarleyWalker w{p};
  s.accepted.clear();
  s.out = PositionWalk{};
  s.path_exits.clear();
  ShallowWalk out;
  out.limit = limit;
  walk_nodes(v, w, s, 0, 0, limit, &out.frontier);
  out.accepted = s.accepted;
  out.refusals = std::move(s.out.refusals);
  out.depths = std::move(s.out.depths);
  return out;
}

bool walk_earley_below(const Vocabulary& v, EarleyParser& p, int32_t state,
                       const ShallowWalk& shallow, WalkScratch& s, PositionWalk& out) {
  s.accepted = shallow.accepted;
  s.out = PositionWalk{};
  s.out.refusals = shallow.refusals;
  s.out.depths = shallow.depths;
  EarleyWalker w{p};
  for (const FrontierNode& f : shallow.frontier) {
    p.reset(state);
    const Vocabulary::TrieNode& n = v.trie()[f.node];
    const std::string& path = v.bytes(v.sorted()[n.lo]);  // every token of the node starts so
    for (size_t d = 0; d < shallow.limit; ++d)
      if (!p.push(static_cast<uint8_t>(path[d]))) return false;  // not in the shallow's class
    s.path_exits = f.exits;
    walk_nodes(v, w, s, f.node, shallow.limit, SIZE_MAX, nullptr);
  }
  std::sort(s.accepted.begin(), s.accepted.end());  // the frontier's tokens interleave
  s.out.accepted = pack(v, s.accepted);
  s.out.exit_bytes = exit_bytes(v, s.out);
  out = std::move(s.out);
  return true;
}

PositionWalk walk_call_free(const Vocabulary& v, SubsetDfa& dfa, int32_t state, WalkScratch& s) {
  s.path.clear();
  s.path.push_back(dfa.start(state, s.path));
  DfaWalker w{dfa, s.path};
  return walk_trie(v, w, s);
}

PositionTable table_of(const Vocabulary& v, const PositionWalk& w, const ByteSet& follow) {
  PositionTable t;
  t.accepted = w.accepted;
  const auto& sorted = v.sorted();
  const auto& trie = v.trie();
  std::unordered_map<std::string_view, size_t> index;  // views of the vocabulary's bytes
  std::vector<uint32_t> kept;
  for (const PositionWalk::Refusal& r : w.refusals) {
    const Vocabulary::TrieNode& n = trie[r.node];
    const std::string& path = v.bytes(sorted[n.lo]);  // every token of the node starts so
    kept.clear();
    for (uint32_t k = r.begin; k < r.end; ++k)
      if (follow.test(static_cast<uint8_t>(path[w.depths[k]]))) kept.push_back(w.depths[k]);
    if (n.hi - n.lo > kMaxGroupedTokens) {
      for (uint32_t k : kept) t.subtrees.push_back({r.node, r.depth, k});
      continue;
    }
    for (uint32_t i = n.lo; i < n.hi && !kept.empty(); ++i) {
      const int32_t id = sorted[i];
      for (uint32_t k : kept) {
        const std::string_view suffix = std::string_view(v.bytes(id)).substr(k);
        const auto [it, fresh] = index.emplace(suffix, t.exits.size());
        if (fresh) t.exits.push_back({std::string(suffix), {}});
        t.exits[it->second].ids.push_back(id);
      }
    }
  }
  std::sort(t.exits.begin(), t.exits.end(),
            [](const ExitGroup& a, const ExitGroup& b) { return a.suffix < b.suffix; });
  return t;
}

}  // namespace rill::grammar
