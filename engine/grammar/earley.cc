#include "engine/grammar/earley.h"

#include <bit>

namespace rill::grammar {

EarleyParser::EarleyParser(const CompiledGrammar& g, size_t max_items_per_set)
    : g_(g), max_items_(max_items_per_set) {
  const size_t cap = std::bit_ceil(max_items_per_set * 2 + 16);
  keys_.assign(cap, 0);
  stamps_.assign(cap, 0);
}

void EarleyParser::begin_set() {
  if (++stamp_ == 0) {  // wrapped: clear the table once
    std::fill(stamps_.begin(), stamps_.end(), 0);
    stamp_ = 1;
  }
  starts_.push_back(static_cast<uint32_t>(items_.size()));
  exited_.push_back(0);
}

bool EarleyParser::add(Item it) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(it.state)) << 32) |
                       static_cast<uint32_t>(it.origin);
  const size_t mask = keys_.size() - 1;
  size_t h = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (stamps_[h] == stamp_) {
    if (keys_[h] == key) return false;
    h = (h + 1) & mask;
  }
  if (items_.size() - starts_.back() >= max_items_) {
    overflow_ = true;
    return false;
  }
  stamps_[h] = stamp_;
  keys_[h] = key;
  items_.push_back(it);
  return true;
}

void EarleyParser::close(int32_t set) {
  for (size_t i = starts_.back(); i < items_.size(); ++i) {
    const Item it = items_[i];
    const AutomatonState& st = g_.state(it.state);
    for (const CallEdge& c : st.calls) {
      add({g_.rule_start(c.rule), set});
      if (g_.nullable(c.rule)) add({c.target, it.origin});
    }
    if (!st.final) continue;
    if (it.origin == kRootOrigin) {
      exited_.back() = 1;
      continue;
    }
    // Completion: advance the items of the origin set waiting for this rule. Items added to
    // the current set later (origin == set) are advanced by the nullable fix above.
    const size_t b = starts_[static_cast<size_t>(it.origin)];
    const size_t e = it.origin == set ? items_.size() : starts_[static_cast<size_t>(it.origin) + 1];
    for (size_t j = b; j < e; ++j) {
      const Item w = items_[j];
      for (const CallEdge& c : g_.state(w.state).calls)
        if (c.rule == st.rule) add({c.target, w.origin});
    }
  }
}

void EarleyParser::reset(int32_t start) {
  items_.clear();
  starts_.clear();
  exited_.clear();
  overflow_ = false;
  begin_set();
  add({start, kRootOrigin});
  close(0);
}

bool EarleyParser::push(uint8_t b) {
  const size_t from = starts_.back(), to = items_.size();
  begin_set();
  overflow_ = false;
  for (size_t i = from; i < to; ++i) {
    const Item it = items_[i];
    for (const ByteEdge& e : g_.state(it.state).bytes)
      if (e.set.test(b)) add({e.target, it.origin});
  }
  return end_set(to);
}

// Closes the set begun at item `to` and keeps it when it holds an item and nothing overflowed;
// else drops it and returns false.
bool EarleyParser::end_set(size_t to) {
  if (items_.size() > to) close(static_cast<int32_t>(starts_.size() - 1));
  if (items_.size() == to || overflow_) {
    items_.resize(to);
    starts_.pop_back();
    exited_.pop_back();
    return false;
  }
  return true;
}

bool EarleyParser::push_completion(int32_t rule, int32_t origin) {
  if (origin == kRootOrigin || static_cast<size_t>(origin) >= starts_.size()) return false;
  const size_t to = items_.size();
  begin_set();
  overflow_ = false;
  // origin is at most the previous set, so starts_[origin + 1] exists.
  const size_t b = starts_[static_cast<size_t>(origin)],
               e = starts_[static_cast<size_t>(origin) + 1];
  for (size_t j = b; j < e; ++j) {
    const Item w = items_[j];
    for (const CallEdge& c : g_.state(w.state).calls)
      if (c.rule == rule) add({c.target, w.origin});
  }
  return end_set(to);
}

void EarleyParser::pop() {
  if (starts_.size() <= 1) return;
  items_.resize(starts_.back());
  starts_.pop_back();
  exited_.pop_back();
}

}  // namespace rill::grammar
