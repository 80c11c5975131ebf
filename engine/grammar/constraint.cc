#include "engine/grammar/constraint.h"

#include <chrono>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/grammar/tagged_json.h"

namespace rill::grammar {

const char* constraint_kind_name(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
    case ConstraintKind::kTaggedJson:
      return "tagged_json";
  }
  return "?";
}

std::string ConstraintSpec::key() const {
  std::string k = constraint_kind_name(kind);
  auto field = [&](const std::string& s) {
    k += '\0';
    k += std::to_string(s.size());
    k += ':';
    k += s;
  };
  field(prefix);
  field(suffix);
  field(text);
  for (const std::string& c : choices) field(c);
  return k;
}

Grammar build_grammar(const ConstraintSpec& spec, const GrammarLimits& limits) {
  size_t size = spec.text.size() + spec.prefix.size() + spec.suffix.size();
  for (const std::string& c : spec.choices) size += c.size() + 1;
  if (size > limits.max_spec_bytes)
    fail(std::string(constraint_kind_name(spec.kind)) + ": the constraint is " +
         std::to_string(size) + " bytes, more than the limit of " +
         std::to_string(limits.max_spec_bytes));
  Grammar g;
  int32_t value = -1;  // the rule of the constrained value
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      value = add_json_schema(g, spec.text, limits);
      break;
    case ConstraintKind::kJsonObject:
      value = add_json_object(g);
      break;
    case ConstraintKind::kRegex: {
      RegexOptions o;
      o.max_repeat = limits.max_repeat;
      o.what = "regex";
      value = g.add_rule("regex");
      g.define(value, compile_regex(g, spec.text, o).expr);
      break;
    }
    case ConstraintKind::kChoice: {
      if (spec.choices.empty()) fail("choice: at least one choice is needed");
      std::vector<int32_t> alts;
      for (const std::string& c : spec.choices) alts.push_back(g.literal(c));
      value = g.add_rule("choice");
      g.define(value, g.choice(std::move(alts)));
      break;
    }
    case ConstraintKind::kGrammar:
      parse_gbnf(g, spec.text, limits);
      value = g.root;
      break;
    case ConstraintKind::kTaggedJson:
      value = add_tagged_json(g, spec.text, limits);
      break;
  }
  if (spec.prefix.empty() && spec.suffix.empty()) {
    g.root = value;
  } else {
    const int32_t root = g.add_rule("constrained_root");
    g.define(root, g.seq({g.literal(spec.prefix), g.ref(value), g.literal(spec.suffix)}));
    g.root = root;
  }
  g.check(limits);
  return g;
}

std::shared_ptr<const CompiledConstraint> compile_constraint(
    const ConstraintSpec& spec, std::shared_ptr<const Vocabulary> vocab,
    const GrammarLimits& limits, TableCache* shared) {
  const auto started = std::chrono::steady_clock::now();
  const Grammar g = build_grammar(spec, limits);
  CompiledGrammar cg(g, limits, started);
  TokenTables tables(cg, *vocab, limits, started, shared);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return std::make_shared<const CompiledConstraint>(
      CompiledConstraint{std::move(vocab), std::move(cg), std::move(tables), limits, ms});
}

ConstraintCache::ConstraintCache(std::shared_ptr<const Vocabulary> vocab, GrammarLimits limits,
                                 size_t capacity)
    : vocab_(std::move(vocab)), limits_(limits), capacity_(std::max<size_t>(capacity, 1)) {}

std::shared_ptr<const CompiledConstraint> ConstraintCache::get(const ConstraintSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  auto compiled = compile_constraint(spec, vocab_, limits_, &tables_);  // outside the lock: slow
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t ConstraintCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}

size_t ConstraintCache::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

}  // namespace rill::grammar
