#include "engine/grammar/matcher.h"

#include <algorithm>
#include <iterator>

namespace rill::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledConstraint> c)
    : c_(std::move(c)), parser_(c_->grammar, c_->limits.max_earley_items_per_byte) {
  parser_.reset(c_->grammar.rule_start(c_->grammar.root_rule()));
}

bool GrammarMatcher::accept(int32_t token) {
  const Vocabulary& v = *c_->vocab;
  if (terminated_ || token < 0 || token >= v.size()) return false;
  if (v.is_eos(token)) {
    if (!can_end()) return false;
    terminated_ = true;
    return true;
  }
  if (v.special(token)) return false;
  const std::string& b = v.bytes(token);
  if (b.empty()) return false;
  size_t pushed = 0;
  for (; pushed < b.size(); ++pushed)
    if (!parser_.push(static_cast<uint8_t>(b[pushed]))) break;
  if (pushed == b.size()) return true;
  for (; pushed > 0; --pushed) parser_.pop();
  return false;
}

void GrammarMatcher::fill_mask(std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  if (terminated_) return;
  const Vocabulary& v = *c_->vocab;
  positions_.clear();
  for (const Item& it : parser_.last_set())
    if (!c_->grammar.state(it.state).bytes.empty() &&
        std::find(positions_.begin(), positions_.end(), it.state) == positions_.end())
      positions_.push_back(it.state);
  uncertain_.clear();
  const auto walkable = c_->tables.walkable();
  // Positions sharing one table (equivalent positions, shared tables) contribute it once.
  tables_.clear();
  for (int32_t s : positions_) {
    const PositionTable* t = c_->tables.at(s);
    if (std::find(tables_.begin(), tables_.end(), t) == tables_.end()) tables_.push_back(t);
  }
  for (const PositionTable* tp : tables_) {
    const PositionTable& t = *tp;
    switch (t.form) {
      case PositionTable::Form::kList:
        for (int32_t id : t.ids) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        break;
      case PositionTable::Form::kBitset:
        for (size_t w = 0; w < words.size(); ++w) words[w] |= t.bits[w];
        break;
      case PositionTable::Form::kComplement: {
        // words |= walkable minus ids: set all walkable, then restore the bits of `ids` that
        // were not set before.
        before_.clear();
        for (int32_t id : t.ids)
          before_.push_back(words[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u);
        for (size_t w = 0; w < words.size(); ++w) words[w] |= walkable[w];
        for (size_t k = 0; k < t.ids.size(); ++k)
          if (!before_[k]) words[static_cast<size_t>(t.ids[k]) >> 5] &= ~(1u << (t.ids[k] & 31));
        break;
      }
    }
    // Each table's list is ascending: merged in, not sorted (a sort of thousands of indices at
    // every string end cost more than checking them).
    if (t.uncertain.empty()) continue;
    if (uncertain_.empty()) {
      uncertain_.assign(t.uncertain.begin(), t.uncertain.end());
      continue;
    }
    merged_.clear();
    std::set_union(uncertain_.begin(), uncertain_.end(), t.uncertain.begin(), t.uncertain.end(),
                   std::back_inserter(merged_));
    uncertain_.swap(merged_);
  }
  check_uncertain(words);
  if (can_end())
    for (int32_t e : v.eos_ids()) words[static_cast<size_t>(e) >> 5] |= 1u << (e & 31);
}

// Walks the uncertain tokens in sorted order: a prefix shared with the previous token stays
// pushed, and a byte that fails rules out every following token with the same prefix.
void GrammarMatcher::check_uncertain(std::span<uint32_t> words) {
  const Vocabulary& v = *c_->vocab;
  const auto& sorted = v.sorted();
  const size_t base = parser_.depth();
  const std::string* prev = nullptr;
  size_t fail_depth = SIZE_MAX;  // prev failed at this byte
  for (uint32_t idx : uncertain_) {
    const int32_t id = sorted[idx];
    const std::string& t = v.bytes(id);
    size_t common = 0;
    if (prev) {
      const size_t lim = std::min(prev->size(), t.size());
      while (common < lim && (*prev)[common] == t[common]) ++common;
    }
    if (fail_depth != SIZE_MAX && common > fail_depth) continue;  // same failing prefix
    if (words[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u) {
      // Already allowed: no need to parse it; keep the walk's state consistent by not
      // treating it as the previous token.
      continue;
    }
    while (parser_.depth() > base + common) parser_.pop();
    fail_depth = SIZE_MAX;
    size_t d = parser_.depth() - base;
    for (; d < t.size(); ++d)
      if (!parser_.push(static_cast<uint8_t>(t[d]))) break;
    if (d == t.size())
      words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    else
      fail_depth = d;
    prev = &t;
  }
  while (parser_.depth() > base) parser_.pop();
}

}  // namespace rill::grammar
