#include "engine/chat/jinja_eval.h"

#include <optional>

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

// What a macro or a call block's `caller` is made of. Points into the syntax tree, which
// outlives the render.
struct MacroSpec {
  std::string name;
  const std::vector<std::pair<std::string, ExprPtr>>* params;
  const NodeList* body;
  bool uses_caller, uses_varargs, uses_kwargs;
};

// Counts nested macro / caller / recursive-loop calls.
class CallDepth {
 public:
  explicit CallDepth(int& depth) : depth_(depth) {
    if (depth_ >= kMaxCallDepth) fail("maximum recursion depth exceeded");
    ++depth_;
  }
  ~CallDepth() { --depth_; }
  CallDepth(const CallDepth&) = delete;
  CallDepth& operator=(const CallDepth&) = delete;

 private:
  int& depth_;
};

std::optional<Value> take_kwarg(DictEntries& kwargs, const std::string& name) {
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      kwargs.erase(it);
      return v;
    }
  }
  return std::nullopt;
}

// Counts the evaluator's own recursion (nested blocks and expressions, across macro calls):
// each level is bounded by the parser, but a recursive macro multiplies them, so the total is
// bounded too, well inside a thread's stack.
class Nesting {
 public:
  explicit Nesting(int& depth) : depth_(depth) {
    if (++depth_ > kMaxRenderNesting) {
      --depth_;
      fail("template nested too deeply while rendering (more than " +
           std::to_string(kMaxRenderNesting) + " levels of blocks and expressions)");
    }
  }
  ~Nesting() { --depth_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  int& depth_;
};

class Evaluator {
 public:
  Flow exec(const NodeList& nodes, const ScopePtr& scope, std::string& out) {
    const Nesting nesting(nesting_);
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
    const Nesting nesting(nesting_);
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
      case Node::Kind::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out += eval(*n.expr, scope).str();
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond, scope).truthy()) return exec(body, scope, out);
        return exec(n.else_body, scope, out);
      case Node::Kind::kFor:
        out += render_loop(n, eval(*n.expr, scope), scope, 1);
        return Flow::kNormal;
      case Node::Kind::kSet:
        assign(n, scope, eval(*n.expr, scope));
        return Flow::kNormal;
      case Node::Kind::kSetBlock:
        assign(n, scope, filtered_body(n, scope));
        return Flow::kNormal;
      case Node::Kind::kMacro:
        scope->set(n.text, make_macro({n.text, &n.params, &n.body, n.uses_caller, n.uses_varargs,
                                       n.uses_kwargs},
                                      scope));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return exec(n.body, scope, out);
      case Node::Kind::kFilterBlock:
        out += filtered_body(n, scope).str();
        return Flow::kNormal;
      case Node::Kind::kWith:
        return exec_with(n, scope, out);
      case Node::Kind::kCallBlock:
        out += call_block(n, scope).str();
        return Flow::kNormal;
    }
    return Flow::kNormal;
  }

  // A block's rendered body, through the node's filters if it has any.
  Value filtered_body(const Node& n, const ScopePtr& scope) {
    std::string captured;
    exec(n.body, scope, captured);
    if (!n.expr) return Value(std::move(captured));
    auto inner = std::make_shared<Scope>(scope);
    inner->set(kFilterInputName, Value(std::move(captured)));
    return eval(*n.expr, inner);
  }

  void assign_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    const ValueList items = v.iterate();
    if (items.size() < targets.size())
      fail("not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
           std::to_string(items.size()) + ")");
    if (items.size() > targets.size())
      fail("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  // `set name = v`, `set a, b = v` or `set ns.attr = v`.
  void assign(const Node& n, const ScopePtr& scope, Value v) {
    if (n.attr.empty()) {
      assign_targets(*scope, n.targets, v);
      return;
    }
    const Value* ns = scope->find(n.targets[0]);
    if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
    Namespace& space = ns->as_namespace();
    if (Value* slot = space.find(n.attr))
      *slot = std::move(v);
    else
      space.attrs.emplace_back(n.attr, std::move(v));
  }

  Flow exec_with(const Node& n, const ScopePtr& scope, std::string& out) {
    DictEntries values;  // all evaluated outside, as in jinja2: `with a = 1, b = a` sees outer a
    for (const auto& [name, e] : n.params) values.emplace_back(name, eval(*e, scope));
    auto inner = std::make_shared<Scope>(scope);
    for (auto& [name, v] : values) inner->set(name, std::move(v));
    return exec(n.body, inner, out);
  }

  // {% call(params) m(args) %}body{% endcall %}: m(args, caller=<body as a macro>).
  Value call_block(const Node& n, const ScopePtr& scope) {
    const Expr& call_expr = *n.expr;
    const Value callee = eval(*call_expr.args[0], scope);
    CallArgs a = eval_args(call_expr, scope, 1);
    a.kwargs.emplace_back("caller", make_macro({"caller", &n.params, &n.body, n.uses_caller,
                                                n.uses_varargs, n.uses_kwargs},
                                               scope));
    return call(callee, a);
  }

  // ---- loops ----

  // One run of a for loop: what every iteration's `loop` object reads from.
  struct LoopRun {
    ValueList items;
    int depth;                              // 1 for the outer loop, +1 per loop(...) call
    std::optional<ValueList> last_changed;  // loop.changed()'s memory
  };

  // jinja2's LoopContext for iteration i: its attributes are computed when read, since most
  // templates read one or two of them, and loop(items) renders the loop one level deeper.
  Value loop_object(const Node& n, const std::shared_ptr<LoopRun>& run, size_t i,
                    const std::weak_ptr<Scope>& outer) {
    struct Iteration {
      std::shared_ptr<LoopRun> run;
      size_t i;
    };
    const auto it = std::make_shared<const Iteration>(Iteration{run, i});
    const Node* node = &n;
    Function recurse = [this, node, outer, it](CallArgs& a) -> Value {
      if (!node->recursive)
        fail("The loop must have the 'recursive' marker to be called recursively.");
      const ScopePtr scope = outer.lock();
      if (!scope || a.args.size() != 1) fail("loop() takes exactly one argument");
      const CallDepth guard(call_depth_);
      return Value(render_loop(*node, a.args[0], scope, it->run->depth + 1));
    };
    auto describe = [it] {
      return "<LoopContext " + std::to_string(it->i + 1) + "/" +
             std::to_string(it->run->items.size()) + ">";
    };
    return Value::object("loop", std::move(recurse), loop_attribute(it->run, i),
                         std::move(describe));
  }

  static std::function<Value(const std::string&)> loop_attribute(std::shared_ptr<LoopRun> run,
                                                                 size_t i) {
    return [run = std::move(run), i](const std::string& name) -> Value {
      const auto length = static_cast<int64_t>(run->items.size());
      const auto index = static_cast<int64_t>(i);
      if (name == "index") return Value(index + 1);
      if (name == "index0") return Value(index);
      if (name == "revindex") return Value(length - index);
      if (name == "revindex0") return Value(length - index - 1);
      if (name == "first") return Value(i == 0);
      if (name == "last") return Value(index == length - 1);
      if (name == "length") return Value(length);
      if (name == "depth") return Value(run->depth);
      if (name == "depth0") return Value(run->depth - 1);
      if (name == "previtem")
        return i > 0 ? run->items[i - 1] : Value::undefined("there is no previous item");
      if (name == "nextitem")
        return index + 1 < length ? run->items[i + 1] : Value::undefined("there is no next item");
      if (name == "cycle")
        return Value::function("cycle", [i](CallArgs& a) -> Value {
          if (a.args.empty()) fail("no items for cycling given");
          return a.args[i % a.args.size()];
        });
      if (name == "changed")  // True when the arguments differ from the previous call's
        return Value::function("changed", [run](CallArgs& a) -> Value {
          const std::optional<ValueList>& prev = run->last_changed;
          bool same = prev && prev->size() == a.args.size();
          for (size_t k = 0; same && k < a.args.size(); ++k) same = (*prev)[k].equals(a.args[k]);
          if (same) return Value(false);
          run->last_changed = a.args;
          return Value(true);
        });
      return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
    };
  }

  std::string render_loop(const Node& n, const Value& iterable, const ScopePtr& scope, int depth) {
    std::string out;
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
      return out;
    }
    const auto run = std::make_shared<LoopRun>(LoopRun{std::move(items), depth, std::nullopt});
    for (size_t i = 0; i < run->items.size(); ++i) {
      auto body_scope = std::make_shared<Scope>(scope);
      body_scope->set("loop", loop_object(n, run, i, scope));
      assign_targets(*body_scope, n.targets, run->items[i]);
      if (exec(n.body, body_scope, out) == Flow::kBreak) break;
    }
    return out;
  }

  // ---- macros ----

  Value make_macro(MacroSpec spec, const ScopePtr& defining_scope) {
    // The defining scope is held weakly: a macro stored in that scope must not keep it alive.
    std::weak_ptr<Scope> weak = defining_scope;
    ValueList names;
    for (const auto& [name, fallback] : *spec.params) names.emplace_back(name);
    DictEntries attrs = {
        {"name", Value(spec.name)},
        {"arguments", Value::list(std::move(names), true)},
        {"catch_kwargs", Value(spec.uses_kwargs)},
        {"catch_varargs", Value(spec.uses_varargs)},
        {"caller", Value(spec.uses_caller)},
    };
    std::string display = "<Macro " + python_string_repr(spec.name) + ">";
    Function fn = [this, spec, weak](CallArgs& a) -> Value {
      const CallDepth guard(call_depth_);
      return invoke_macro(spec, weak.lock(), a);
    };
    return Value::function(spec.name, std::move(fn), std::move(attrs), std::move(display));
  }

  // jinja2's Macro.__call__: positional, then keyword arguments, then defaults; `caller`,
  // `varargs` and `kwargs` only when the body refers to them, else extras are refused.
  Value invoke_macro(const MacroSpec& spec, const ScopePtr& defining_scope, CallArgs& a) {
    const auto& params = *spec.params;
    const size_t count = params.size();
    std::vector<std::optional<Value>> values(count);
    DictEntries kwargs = a.kwargs;
    bool found_caller = false;
    for (size_t i = 0; i < count && i < a.args.size(); ++i) values[i] = a.args[i];
    if (a.args.size() < count) {
      for (size_t i = a.args.size(); i < count; ++i) {
        values[i] = take_kwarg(kwargs, params[i].first);
        found_caller = found_caller || params[i].first == "caller";
      }
    } else {
      for (const auto& p : params) found_caller = found_caller || p.first == "caller";
    }
    std::optional<Value> caller;
    if (spec.uses_caller && !found_caller) {
      caller = take_kwarg(kwargs, "caller");
      if (!caller) caller = Value::undefined("No caller defined");
    }
    if (!spec.uses_kwargs && !kwargs.empty()) {
      for (const auto& [k, v] : kwargs)
        if (k == "caller")
          fail("macro '" + spec.name +
               "' was invoked with two values for the special caller argument. This is most "
               "likely a bug.");
      fail("macro '" + spec.name + "' takes no keyword argument '" + kwargs.front().first + "'");
    }
    if (!spec.uses_varargs && a.args.size() > count)
      fail("macro '" + spec.name + "' takes not more than " + std::to_string(count) +
           " argument(s)");
    auto scope = std::make_shared<Scope>(defining_scope);
    for (size_t i = 0; i < count; ++i) {
      const auto& [name, fallback] = params[i];
      Value v = values[i]  ? *values[i]
                : fallback ? eval(*fallback, scope)  // sees the parameters before it
                           : Value::undefined("parameter '" + name + "' was not provided");
      scope->set(name, std::move(v));
    }
    if (caller) scope->set("caller", *caller);
    if (spec.uses_kwargs) scope->set("kwargs", Value::dict(kwargs));
    if (spec.uses_varargs) {
      ValueList extra;
      for (size_t i = count; i < a.args.size(); ++i) extra.push_back(a.args[i]);
      scope->set("varargs", Value::list(std::move(extra), true));
    }
    std::string out;
    exec(*spec.body, scope, out);
    return Value(std::move(out));
  }

  // ---- expressions ----

  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.args.push_back(eval(*e.args[i], scope));
    for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, scope));
    return a;
  }

  Value eval_expr(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
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
      case Expr::Kind::kDict:
        return eval_dict(e, scope);
      case Expr::Kind::kAttr:
        return get_attribute_checked(eval(*e.args[0], scope), e.name);
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
      case Expr::Kind::kUnary:
        return unary(e.name, eval(*e.args[0], scope));
      case Expr::Kind::kBinary:
        return eval_binary(e, scope);
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
    DictItems items;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      Value key = eval(*e.args[i], scope);
      key.check_hashable();
      Value v = eval(*e.args[i + 1], scope);
      bool replaced = false;
      for (auto& [k, old] : items) {
        if (k.equals(key)) {  // {1: 'a', 1.0: 'b'} keeps the first key, the last value
          old = v;
          replaced = true;
        }
      }
      if (!replaced) items.emplace_back(std::move(key), std::move(v));
    }
    return Value::dict(std::move(items));
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

  int call_depth_ = 0;
  int nesting_ = 0;
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
