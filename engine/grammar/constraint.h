// Constraints as the engine takes them, their compilation against a vocabulary, and the
// cache of compiled constraints shared by all requests.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/vocabulary.h"

namespace rill::grammar {

enum class ConstraintKind : uint8_t {
  kJsonSchema,  // text: a JSON schema document
  kJsonObject,  // any JSON object (text unused)
  kRegex,       // text: a regular expression (regex_compiler.h), matched whole
  kChoice,      // choices: the output is exactly one of them
  kGrammar,     // text: a GBNF grammar (gbnf.h)
  kTaggedJson,  // text: tagged JSON values (tagged_json.h; forced Mistral v11 tool calls)
};

const char* constraint_kind_name(ConstraintKind k);

/// One request's constraint. `prefix` and `suffix` are literal bytes around the constrained
/// value (tool calls: `<tool_call>{"name": "f", "arguments": ` + schema + `}</tool_call>`).
struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  std::string prefix, suffix;

  /// The cache key: kind, prefix, suffix and text, unambiguously delimited.
  std::string key() const;
};

/// Builds the grammar of `spec` (no vocabulary involved). Throws rill::Error
/// (kInvalidArgument) naming the problem.
Grammar build_grammar(const ConstraintSpec& spec, const GrammarLimits& limits);

/// Compiles `spec` against `vocab`: grammar, automaton, token tables (`shared`, may be null:
/// tables reused across the constraints of `vocab`, TableCache).
std::shared_ptr<const CompiledConstraint> compile_constraint(
    const ConstraintSpec& spec, std::shared_ptr<const Vocabulary> vocab,
    const GrammarLimits& limits, TableCache* shared = nullptr);

/// Compiled constraints by (spec, vocabulary), least recently used evicted past `capacity`;
/// their call-free token tables are shared across specs (TableCache).
/// Thread-safe; two threads compiling the same new spec may both compile it.
class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const Vocabulary> vocab, GrammarLimits limits,
                  size_t capacity = 64);
  std::shared_ptr<const CompiledConstraint> get(const ConstraintSpec& spec);
  const Vocabulary& vocab() const { return *vocab_; }
  const GrammarLimits& limits() const { return limits_; }
  size_t hits() const;
  size_t misses() const;
  /// Token tables shared across this vocabulary's constraints (TableCache).
  size_t shared_tables() const { return tables_.size(); }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledConstraint>>;
  std::shared_ptr<const Vocabulary> vocab_;
  GrammarLimits limits_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t hits_ = 0, misses_ = 0;
  TableCache tables_;
};

}  // namespace rill::grammar
