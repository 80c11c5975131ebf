// Jinja evaluator: renders a parsed template against variables. Scoping follows jinja2: each
// for-loop iteration, macro or caller call and {% with %} block gets its own scope, so `set`
// inside them does not leak out; `if` does not open a scope; namespace() attributes can be
// assigned from any scope.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "engine/chat/jinja_ast.h"

namespace rill::jinja {

/// A variable scope; lookups fall through to the parent.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  /// The variable, or nullptr when no scope up the chain has it.
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};

/// Macro, caller and recursive-loop calls nest at most this deep (Python would stop runaway
/// recursion with RecursionError; this stops it before the stack does).
inline constexpr int kMaxCallDepth = 100;
/// Nested blocks and expressions being evaluated at once, across those calls.
inline constexpr int kMaxRenderNesting = 4000;

/// Renders `nodes` with `globals` as the outermost scope. Throws TemplateError with the line of
/// the node that failed (raise_exception errors keep only the template's message).
std::string render_template(const NodeList& nodes, std::shared_ptr<Scope> globals);

}  // namespace rill::jinja
