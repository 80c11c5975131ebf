#include "engine/grammar/matcher.h"

#include <algorithm>

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
  const CompiledGrammar& g = c_->grammar;
  // Positions sharing one table (equivalent positions, shared tables) contribute it once; its
  // exit groups once per (rule, origin) of the items at those positions.
  tables_.clear();
  sources_.clear();
  const auto here = static_cast<int32_t>(parser_.depth());
  for (const Item& it : parser_.last_set()) {
    // An item predicted here of an expanded rule: its caller's table covers it (token_tables.h).
    if (it.origin == here && c_->tables.expanded(g.state(it.state).rule)) continue;
    const PositionTable* t = c_->tables.at(it.state);
    if (t == nullptr) continue;
    if (std::find(tables_.begin(), tables_.end(), t) == tables_.end()) tables_.push_back(t);
    if (t->exits.empty() && t->subtrees.empty()) continue;
    const ExitSource src{t, g.state(it.state).rule, it.origin};
    if (std::find(sources_.begin(), sources_.end(), src) == sources_.end()) sources_.push_back(src);
  }
  for (const PositionTable* t : tables_) or_accepted(*t->accepted, words);
  for (const ExitSource& src : sources_) check_exits(src, words);
  if (can_end())
    for (int32_t e : v.eos_ids()) words[static_cast<size_t>(e) >> 5] |= 1u << (e & 31);
}

void GrammarMatcher::or_accepted(const AcceptedSet& t, std::span<uint32_t> words) {
  switch (t.form) {
    case AcceptedSet::Form::kList:
      for (int32_t id : t.ids) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      break;
    case AcceptedSet::Form::kBitset:
      for (size_t w = 0; w < words.size(); ++w) words[w] |= t.bits[w];
      break;
    case AcceptedSet::Form::kComplement: {
      // words |= walkable minus ids: set all walkable, then restore the bits of `ids` that
      // were not set before.
      const auto walkable = c_->tables.walkable();
      before_.clear();
      for (int32_t id : t.ids)
        before_.push_back(words[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u);
      for (size_t w = 0; w < words.size(); ++w) words[w] |= walkable[w];
      for (size_t k = 0; k < t.ids.size(); ++k)
        if (!before_[k]) words[static_cast<size_t>(t.ids[k]) >> 5] &= ~(1u << (t.ids[k] & 31));
      break;
    }
  }
}

// From the continuation of src.rule's completion, parses each distinct suffix of the table's
// exit groups in sorted order: a prefix shared with the previous suffix stays pushed, and a
// byte that fails rules out every following suffix with the same prefix. A suffix that parses
// allows every token of its group.
void GrammarMatcher::check_exits(const ExitSource& src, std::span<uint32_t> words) {
  const size_t before = parser_.depth();
  if (!parser_.push_completion(src.rule, src.origin)) return;
  const size_t base = parser_.depth();
  const std::string* prev = nullptr;
  size_t fail_depth = SIZE_MAX;  // prev failed at this byte
  for (const ExitGroup& grp : src.table->exits) {
    const std::string& t = grp.suffix;
    size_t common = 0;
    if (prev) {
      const size_t lim = std::min(prev->size(), t.size());
      while (common < lim && (*prev)[common] == t[common]) ++common;
    }
    if (fail_depth != SIZE_MAX && common > fail_depth) continue;  // same failing prefix
    while (parser_.depth() > base + common) parser_.pop();
    fail_depth = SIZE_MAX;
    size_t d = parser_.depth() - base;
    for (; d < t.size(); ++d)
      if (!parser_.push(static_cast<uint8_t>(t[d]))) break;
    if (d == t.size())
      for (int32_t id : grp.ids) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    else
      fail_depth = d;
    prev = &t;
  }
  while (parser_.depth() > base) parser_.pop();
  for (const ExitSubtree& e : src.table->subtrees) check_subtree(e, words);
  while (parser_.depth() > before) parser_.pop();
}

// From the continuation (the parser's current set): pushes the node's path from the exit on,
// then walks the trie under the node; every token whose bytes all parse is allowed. A byte that
// fails settles its node's subtree at once. Leaves the parser as it found it.
void GrammarMatcher::check_subtree(const ExitSubtree& e, std::span<uint32_t> words) {
  const Vocabulary& v = *c_->vocab;
  const auto& trie = v.trie();
  const size_t base = parser_.depth();
  const Vocabulary::TrieNode& root = trie[e.node];
  const std::string& path = v.bytes(v.sorted()[root.lo]);
  auto allow = [&](const Vocabulary::TrieNode& n) {
    for (uint32_t i = n.lo; i < n.lo + n.ends; ++i) {
      const int32_t id = v.sorted()[i];
      words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    }
  };
  bool ok = true;
  for (uint32_t d = e.exit; d < e.depth && ok; ++d)
    ok = parser_.push(static_cast<uint8_t>(path[d]));
  if (ok) {
    allow(root);
    next_.assign(1, root.first_child);
    while (!next_.empty()) {
      const uint32_t c = next_.back();
      if (c == 0) {
        next_.pop_back();
        if (!next_.empty()) parser_.pop();
        continue;
      }
      const Vocabulary::TrieNode& n = trie[c];
      next_.back() = n.next_sibling;
      if (!parser_.push(n.byte)) continue;
      allow(n);
      next_.push_back(n.first_child);
    }
  }
  while (parser_.depth() > base) parser_.pop();
}

}  // namespace rill::grammar
