#include "engine/grammar/subset_dfa.h"

#include <algorithm>

namespace rill::grammar {

namespace {

std::string key_of(const std::vector<int32_t>& set) {
  return std::string(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(int32_t));
}

}  // namespace

SubsetDfa::SubsetDfa(const CompiledGrammar& g, size_t max_states)
    : g_(g), max_states_(std::max<size_t>(max_states, 1)), seen_(g.num_states(), 0) {}

int32_t SubsetDfa::start(int32_t state, std::span<int32_t> live) {
  scratch_.assign(1, state);
  return intern(scratch_, live);
}

int32_t SubsetDfa::add_transition(uint8_t b, std::span<int32_t> live) {
  const auto from = static_cast<size_t>(live.back());
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0u);
    stamp_ = 1;
  }
  scratch_.clear();
  for (int32_t s : sets_[from])
    for (const ByteEdge& e : g_.state(s).bytes)
      if (e.set.test(b) && seen_[static_cast<size_t>(e.target)] != stamp_) {
        seen_[static_cast<size_t>(e.target)] = stamp_;
        scratch_.push_back(e.target);
      }
  if (scratch_.empty()) {
    trans_[from * 256 + b] = -1;
    return -1;
  }
  std::sort(scratch_.begin(), scratch_.end());
  const int32_t to = intern(scratch_, live);
  // intern() may have renumbered live (and so `from`): record the edge from its new number.
  trans_[static_cast<size_t>(live.back()) * 256 + b] = to;
  return to;
}

int32_t SubsetDfa::intern(std::vector<int32_t>& set, std::span<int32_t> live) {
  std::string key = key_of(set);
  if (const auto it = ids_.find(key); it != ids_.end()) return it->second;
  if (sets_.size() >= max_states_) compact(live);
  const auto id = static_cast<int32_t>(sets_.size());
  bool fin = false;
  for (int32_t s : set) fin = fin || g_.state(s).final;
  sets_.push_back(set);
  final_.push_back(fin ? 1 : 0);
  trans_.resize(trans_.size() + 256, kUnknown);
  ids_.emplace(std::move(key), id);
  return id;
}

// Starts afresh, keeping the DFA states in `live` (renumbered in place, duplicates merged).
void SubsetDfa::compact(std::span<int32_t> live) {
  std::vector<std::vector<int32_t>> kept;
  for (int32_t& d : live) {
    const auto& set = sets_[static_cast<size_t>(d)];
    const auto it = std::find(kept.begin(), kept.end(), set);
    d = static_cast<int32_t>(it - kept.begin());
    if (it == kept.end()) kept.push_back(set);
  }
  sets_.clear();
  final_.clear();
  trans_.clear();
  ids_.clear();
  for (auto& set : kept) {
    bool fin = false;
    for (int32_t s : set) fin = fin || g_.state(s).final;
    ids_.emplace(key_of(set), static_cast<int32_t>(sets_.size()));
    sets_.push_back(std::move(set));
    final_.push_back(fin ? 1 : 0);
    trans_.resize(trans_.size() + 256, kUnknown);
  }
}

}  // namespace rill::grammar
