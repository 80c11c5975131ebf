#include "engine/chat/jinja_eval.h"

#include <cmath>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"

namespace rill::jinja {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Flow exec(const NodeList& nodes, const ScopePtr& scope, std::string& out) {
    for (const auto& node : nodes) {
      try {
        const Flow flow = exec_node(*node, scope, out);
        if (flow != Flow::kNormal) return flow;
      } catch (const TemplateError& e) {
        if (e.line() != 0 || e.raised_by_template()) throw;
        throw TemplateError(e.what(), node->line);
      }
    }
    return Flow::kNormal;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_expr(e, scope);
    } catch (const TemplateError& err) {
      if (err.line() != 0 || err.raised_by_template()) throw;
      throw TemplateError(err.what(), e.line);
    }
  }

 private:
  Flow exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText: out += n.text; return Flow::kNormal;
      case Node::Kind::kOutput: out += eval(*n.expr, scope).str(); return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(n.else_body, scope, out);
      case Node::Kind::kFor: exec_for(n, scope, out); return Flow::kNormal;
      case Node::Kind::kSet: exec_set(n, scope); return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string captured;
        exec(n.body, scope, captured);
        scope->set(n.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: scope->set(n.text, make_macro(n, scope)); return Flow::kNormal;
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
      case Node::Kind::kScope: return exec(n.body, scope, out);
      case Node::Kind::kFilterBlock: {
        std::string captured;
        exec(n.body, scope, captured);
        auto inner = std::make_shared<Scope>(scope);
        inner->set(kFilterInputName, Value(std::move(captured)));
        out += eval(*n.expr, inner).str();
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  void assign_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    const ValueList items = v.iterate();
    if (items.size() != targets.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " +
           std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  void exec_set(const Node& n, const ScopePtr& scope) {
    Value v = eval(*n.expr, scope);
    if (n.attr.empty()) {
      assign_targets(*scope, n.targets, v);
      return;
    }
    const Value* ns = scope->find(n.targets[0]);
    if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
    Namespace& space = ns->as_namespace();
    if (Value* slot = space.find(n.attr)) *slot = std::move(v);
    else space.attrs.emplace_back(n.attr, std::move(v));
  }

  static Value loop_object(const ValueList& items, size_t i, const Value& cycle) {
    const auto length = static_cast<int64_t>(items.size());
    const auto index = static_cast<int64_t>(i);
    DictEntries loop = {
        {"index", Value(index + 1)},
        {"index0", Value(index)},
        {"revindex", Value(length - index)},
        {"revindex0", Value(length - index - 1)},
        {"first", Value(i == 0)},
        {"last", Value(index == length - 1)},
        {"length", Value(length)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {"nextitem",
         index + 1 < length ? items[i + 1] : Value::undefined("there is no next item")},
        {"cycle", cycle},
    };
    return Value::dict(std::move(loop));
  }

  void exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*n.expr, scope);
    ValueList items;
    for (Value& item : iterable.iterate()) {
      if (n.cond) {  // loop filtering: the condition sees the loop variables, not `loop`
        auto probe = std::make_shared<Scope>(scope);
        assign_targets(*probe, n.targets, item);
        if (!eval(*n.cond, probe).truthy()) continue;
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) {
      exec(n.else_body, scope, out);
      return;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      auto body_scope = std::make_shared<Scope>(scope);
      const Value cycle = Value::function("cycle", [i](CallArgs& a) -> Value {
        if (a.args.empty()) fail("no items for cycling given");
        return a.args[i % a.args.size()];
      });
      body_scope->set("loop", loop_object(items, i, cycle));
      assign_targets(*body_scope, n.targets, items[i]);
      if (exec(n.body, body_scope, out) == Flow::kBreak) break;
    }
  }

  Value make_macro(const Node& n, const ScopePtr& defining_scope) {
    const Node* node = &n;
    // The defining scope is held weakly: a macro stored in that scope must not keep it alive.
    std::weak_ptr<Scope> weak = defining_scope;
    return Value::function(n.text, [this, node, weak](CallArgs& a) -> Value {
      // Python stops runaway recursion with RecursionError; so do we, before the stack does.
      if (macro_depth_ >= kMaxMacroDepth) fail("maximum recursion depth exceeded");
      struct DepthGuard {
        int& depth;
        explicit DepthGuard(int& d) : depth(++d) {}
        ~DepthGuard() { --depth; }
      } guard(macro_depth_);
      auto scope = std::make_shared<Scope>(weak.lock());
      if (a.args.size() > node->params.size())
        fail("macro '" + node->text + "' takes not more than " +
             std::to_string(node->params.size()) + " argument(s)");
      for (size_t i = 0; i < node->params.size(); ++i) {
        const auto& [name, fallback] = node->params[i];
        Value v = a.get(i, name, Value::undefined("'" + name + "' is undefined"));
        if (i >= a.args.size() && v.is_undefined() && fallback) v = eval(*fallback, scope);
        scope->set(name, std::move(v));
      }
      for (const auto& [key, v] : a.kwargs) {
        bool known = false;
        for (const auto& p : node->params) known = known || p.first == key;
        if (!known) fail("macro '" + node->text + "' takes no keyword argument '" + key + "'");
      }
      std::string out;
      exec(node->body, scope, out);
      return Value(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.args.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, scope));
    return a;
  }

  Value eval_expr(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& item : e.args) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: return eval_dict(e, scope);
      case Expr::Kind::kAttr: return get_attribute_checked(eval(*e.args[0], scope), e.name);
      case Expr::Kind::kItem:
        return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::kSlice: {
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.args[i + 1]) parts[i] = eval(*e.args[i + 1], scope);
        return slice(eval(*e.args[0], scope), parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.args[0], scope);
        CallArgs a = eval_args(e, scope, 1);
        return call(callee, a);
      }
      case Expr::Kind::kFilter: {
        const Value operand = eval(*e.args[0], scope);
        return apply_filter(e.name, operand, eval_args(e, scope, 1));
      }
      case Expr::Kind::kTest: {
        const Value operand = eval(*e.args[0], scope);
        return Value(apply_test(e.name, operand, eval_args(e, scope, 1)) != e.negated);
      }
      case Expr::Kind::kUnary: return unary(e.name, eval(*e.args[0], scope));
      case Expr::Kind::kBinary: return eval_binary(e, scope);
      case Expr::Kind::kCompare: {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond:
        if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
        return e.args[2] ? eval(*e.args[2], scope)
                         : Value::undefined("the inline if-expression evaluated to false");
    }
    fail("unknown expression");
  }

  Value eval_dict(const Expr& e, const ScopePtr& scope) {
    DictEntries entries;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      const Value key = eval(*e.args[i], scope);
      if (!key.is_string()) fail("dict keys must be strings in chat templates");
      Value v = eval(*e.args[i + 1], scope);
      bool replaced = false;
      for (auto& [k, old] : entries)
        if (k == key.as_string()) {
          old = v;
          replaced = true;
        }
      if (!replaced) entries.emplace_back(key.as_string(), std::move(v));
    }
    return Value::dict(std::move(entries));
  }

  Value eval_binary(const Expr& e, const ScopePtr& scope) {
    if (e.name == "and") {
      Value left = eval(*e.args[0], scope);
      return left.truthy() ? eval(*e.args[1], scope) : left;
    }
    if (e.name == "or") {
      Value left = eval(*e.args[0], scope);
      return left.truthy() ? left : eval(*e.args[1], scope);
    }
    return binary(e.name, eval(*e.args[0], scope), eval(*e.args[1], scope));
  }

  static constexpr int kMaxMacroDepth = 100;
  int macro_depth_ = 0;
};

}  // namespace

std::string render_template(const NodeList& nodes, std::shared_ptr<Scope> globals) {
  Evaluator evaluator;
  auto scope = std::make_shared<Scope>(std::move(globals));
  std::string out;
  evaluator.exec(nodes, scope, out);
  return out;
}

}  // namespace rill::jinja
