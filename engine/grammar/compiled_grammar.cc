#include "engine/grammar/compiled_grammar.h"

#include <algorithm>
#include <optional>
#include <string>

#include "engine/grammar/grammar_error.h"

namespace rill::grammar {

namespace {

using Clock = std::chrono::steady_clock;

// Thompson automaton of one rule: each node has epsilon edges and at most one consuming edge.
struct TNode {
  std::vector<int32_t> eps;
  int kind = 0;  // 0 none, 1 byte set, 2 rule call
  ByteSet set;
  int32_t rule = -1;
  int32_t target = -1;
};

struct Frag {
  int32_t start, end;
};

bool is_leaf(const Expr& e) {
  return e.kind == ExprKind::kEmpty || e.kind == ExprKind::kBytes || e.kind == ExprKind::kByteSet ||
         e.kind == ExprKind::kRuleRef;
}

// How many copies of its child a repetition needs (the last of an unbounded one loops).
int64_t instances(const Expr& e) {
  return e.max < 0 ? std::max(e.min, 1) : e.max;
}

class RuleLowering {
 public:
  RuleLowering(const Grammar& g, std::vector<int32_t>& pending_bodies, size_t first_aux_rule,
               size_t node_budget)
      : g_(g), pending_(pending_bodies), first_aux_(first_aux_rule), budget_(node_budget) {}

  // Lowers the expression tree at `body`; returns the fragment. Hoisted sub-expressions are
  // appended to `pending_bodies` as new rules.
  Frag lower(int32_t body) {
    struct Task {
      int32_t expr;
      int phase;
      int32_t hoisted_rule;
    };
    std::vector<Task> tasks{{body, 0, -1}};
    std::vector<Frag> results;
    while (!tasks.empty()) {
      Task t = tasks.back();
      tasks.pop_back();
      const Expr& e = g_.expr(t.expr);
      if (is_leaf(e)) {
        results.push_back(leaf(e));
        continue;
      }
      if (t.phase == 0) {
        if (e.kind == ExprKind::kRepeat) {
          const Expr& child = g_.expr(e.children[0]);
          if (e.max == 0) {
            results.push_back(leaf(Expr{}));
            continue;
          }
          const int64_t copies = instances(e);
          if (!is_leaf(child) && copies > 1 &&
              copies * subtree_size(e.children[0], 20000) > 20000) {
            const auto rule = static_cast<int32_t>(first_aux_ + pending_.size());
            pending_.push_back(e.children[0]);
            tasks.push_back({t.expr, 1, rule});
            continue;
          }
          tasks.push_back({t.expr, 1, -1});
          // Copies of a small child are inlined: hoisting it into a rule of its own would make
          // each copy's end a rule exit, which the token tables cannot decide in advance.
          if (!is_leaf(child))
            for (int64_t k = 0; k < copies; ++k) tasks.push_back({e.children[0], 0, -1});
          continue;
        }
        tasks.push_back({t.expr, 1, -1});
        for (auto it = e.children.rbegin(); it != e.children.rend(); ++it)
          tasks.push_back({*it, 0, -1});
        continue;
      }
      results.push_back(combine(e, t.hoisted_rule, results));
    }
    return results.back();
  }

  std::vector<TNode> nodes;

 private:
  // Expressions under `e`, counting stops past `limit`.
  int64_t subtree_size(int32_t e, int64_t limit) const {
    int64_t n = 0;
    std::vector<int32_t> stack{e};
    while (!stack.empty() && n <= limit) {
      const Expr& x = g_.expr(stack.back());
      stack.pop_back();
      ++n;
      for (int32_t c : x.children) stack.push_back(c);
    }
    return n;
  }

  int32_t node() {
    if (nodes.size() >= budget_) fail("grammar automaton exceeds the limit of states");
    nodes.emplace_back();
    return static_cast<int32_t>(nodes.size() - 1);
  }
  void eps(int32_t a, int32_t b) { nodes[static_cast<size_t>(a)].eps.push_back(b); }
  int32_t consume(int32_t from, int kind, const ByteSet& s, int32_t rule) {
    const int32_t to = node();
    TNode& n = nodes[static_cast<size_t>(from)];
    n.kind = kind;
    n.set = s;
    n.rule = rule;
    n.target = to;
    return to;
  }

  Frag leaf(const Expr& e) {
    const int32_t s = node();
    int32_t cur = s;
    switch (e.kind) {
      case ExprKind::kBytes:
        for (char c : e.bytes) cur = consume(cur, 1, ByteSet::of(static_cast<uint8_t>(c)), -1);
        break;
      case ExprKind::kByteSet:
        cur = consume(cur, 1, e.set, -1);
        break;
      case ExprKind::kRuleRef:
        cur = consume(cur, 2, ByteSet{}, e.rule);
        break;
      default:
        break;
    }
    return {s, cur};
  }

  Frag combine(const Expr& e, int32_t hoisted_rule, std::vector<Frag>& results) {
    if (e.kind == ExprKind::kSeq || e.kind == ExprKind::kChoice) {
      const size_t n = e.children.size();
      std::vector<Frag> parts(results.end() - static_cast<std::ptrdiff_t>(n), results.end());
      results.resize(results.size() - n);
      if (e.kind == ExprKind::kSeq) {
        for (size_t i = 0; i + 1 < n; ++i) eps(parts[i].end, parts[i + 1].start);
        return {parts.front().start, parts.back().end};
      }
      const Frag f{node(), node()};
      for (const Frag& p : parts) {
        eps(f.start, p.start);
        eps(p.end, f.end);
      }
      return f;
    }
    // Repetition.
    const Expr& child = g_.expr(e.children[0]);
    std::vector<Frag> copies;
    if (hoisted_rule < 0 && !is_leaf(child)) {
      const auto n = static_cast<size_t>(instances(e));
      copies.assign(results.end() - static_cast<std::ptrdiff_t>(n), results.end());
      results.resize(results.size() - n);
    }
    size_t used = 0;
    auto make = [&]() -> Frag {
      if (!copies.empty()) return copies[used++];
      if (hoisted_rule >= 0) {
        Expr call;
        call.kind = ExprKind::kRuleRef;
        call.rule = hoisted_rule;
        return leaf(call);
      }
      return leaf(child);
    };
    const int32_t start = node();
    int32_t cur = start;
    int32_t last_start = -1;
    for (int32_t i = 0; i < e.min; ++i) {
      const Frag f = make();
      eps(cur, f.start);
      last_start = f.start;
      cur = f.end;
    }
    const int32_t end = node();
    if (e.max < 0) {
      if (e.min == 0) {
        const Frag f = make();
        eps(cur, f.start);
        eps(f.end, cur);
      } else {
        eps(cur, last_start);
      }
      eps(cur, end);
      return {start, end};
    }
    for (int32_t i = e.min; i < e.max; ++i) {
      eps(cur, end);
      const Frag f = make();
      eps(cur, f.start);
      cur = f.end;
    }
    eps(cur, end);
    return {start, end};
  }

  const Grammar& g_;
  std::vector<int32_t>& pending_;
  size_t first_aux_;
  size_t budget_;
};

void check_time(Clock::time_point started, const GrammarLimits& limits) {
  if (Clock::now() - started > limits.compile_timeout)
    fail("grammar compilation exceeded the time-out of " +
         std::to_string(limits.compile_timeout.count()) + " ms");
}

}  // namespace

CompiledGrammar::CompiledGrammar(const Grammar& g, const GrammarLimits& limits,
                                 Clock::time_point started) {
  g.check(limits);
  root_ = g.root;
  std::vector<int32_t> bodies;
  for (const Rule& r : g.rules()) bodies.push_back(r.body);
  const size_t num_named = bodies.size();
  num_named_ = num_named;
  std::vector<int32_t> pending;  // hoisted repetition bodies: rules num_named, num_named + 1, ...
  for (size_t r = 0; r < bodies.size() || r - num_named < pending.size(); ++r) {
    const int32_t body = r < num_named ? bodies[r] : pending[r - num_named];
    if (rule_start_.size() >= limits.max_rules + num_named)
      fail("grammar has more rules than the limit of " + std::to_string(limits.max_rules));
    check_time(started, limits);
    const size_t budget = limits.max_automaton_states - states_.size();
    RuleLowering lower(g, pending, num_named, budget * 4 + 64);
    const Frag f = lower.lower(body);
    std::vector<TNode>& nodes = lower.nodes;
    // Epsilon removal: the states are the start node and the targets of consuming edges.
    std::vector<int32_t> id(nodes.size(), -1);
    const size_t base = states_.size();
    std::vector<int32_t> order{f.start};
    id[static_cast<size_t>(f.start)] = static_cast<int32_t>(base);
    std::vector<uint32_t> seen(nodes.size(), 0);
    uint32_t stamp = 0;
    const auto rule = static_cast<int32_t>(r);
    rule_start_.push_back(id[static_cast<size_t>(f.start)]);
    for (size_t k = 0; k < order.size(); ++k) {
      if (states_.size() >= limits.max_automaton_states)
        fail("grammar automaton has more states than the limit of " +
             std::to_string(limits.max_automaton_states));
      AutomatonState st;
      st.rule = rule;
      ++stamp;
      std::vector<int32_t> stack{order[k]};
      seen[static_cast<size_t>(order[k])] = stamp;
      while (!stack.empty()) {
        const TNode& n = nodes[static_cast<size_t>(stack.back())];
        if (stack.back() == f.end) st.final = true;
        stack.pop_back();
        if (n.kind != 0) {
          int32_t& tid = id[static_cast<size_t>(n.target)];
          if (tid < 0) {
            tid = static_cast<int32_t>(base + order.size());
            order.push_back(n.target);
          }
          if (n.kind == 1) {
            auto it = std::find_if(st.bytes.begin(), st.bytes.end(),
                                   [&](const ByteEdge& b) { return b.target == tid; });
            if (it != st.bytes.end())
              it->set |= n.set;
            else
              st.bytes.push_back({n.set, tid});
          } else if (std::none_of(st.calls.begin(), st.calls.end(), [&](const CallEdge& c) {
                       return c.target == tid && c.rule == n.rule;
                     })) {
            st.calls.push_back({n.rule, tid});
          }
        }
        for (int32_t e : n.eps)
          if (seen[static_cast<size_t>(e)] != stamp) {
            seen[static_cast<size_t>(e)] = stamp;
            stack.push_back(e);
          }
      }
      states_.push_back(std::move(st));
    }
  }
  compute_nullable();
  check_time(started, limits);
  compute_follow();
  check_time(started, limits);
}

void CompiledGrammar::compute_nullable() {
  nullable_.assign(rule_start_.size(), 0);
  std::vector<uint32_t> seen(states_.size(), 0);
  uint32_t stamp = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rule_start_.size(); ++r) {
      if (nullable_[r]) continue;
      ++stamp;
      std::vector<int32_t> stack{rule_start_[r]};
      seen[static_cast<size_t>(rule_start_[r])] = stamp;
      while (!stack.empty() && !nullable_[r]) {
        const AutomatonState& s = states_[static_cast<size_t>(stack.back())];
        stack.pop_back();
        if (s.final) nullable_[r] = 1;
        for (const CallEdge& c : s.calls)
          if (nullable_[static_cast<size_t>(c.rule)] &&
              seen[static_cast<size_t>(c.target)] != stamp) {
            seen[static_cast<size_t>(c.target)] = stamp;
            stack.push_back(c.target);
          }
      }
      changed |= nullable_[r] != 0;
    }
  }
}

void CompiledGrammar::compute_follow() {
  const size_t n = states_.size();
  std::vector<ByteSet> first(n);
  std::vector<uint8_t> ends(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = n; i-- > 0;) {
      const AutomatonState& s = states_[i];
      ByteSet f = first[i];
      bool e = ends[i] || s.final;
      for (const ByteEdge& b : s.bytes) f |= b.set;
      for (const CallEdge& c : s.calls) {
        f |= first[static_cast<size_t>(rule_start_[static_cast<size_t>(c.rule)])];
        if (nullable_[static_cast<size_t>(c.rule)]) {
          f |= first[static_cast<size_t>(c.target)];
          e = e || ends[static_cast<size_t>(c.target)];
        }
      }
      if (!(f == first[i]) || e != (ends[i] != 0)) {
        first[i] = f;
        ends[i] = e;
        changed = true;
      }
    }
  }
  follow_.assign(rule_start_.size(), ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (const AutomatonState& s : states_)
      for (const CallEdge& c : s.calls) {
        ByteSet f = follow_[static_cast<size_t>(c.rule)];
        f |= first[static_cast<size_t>(c.target)];
        if (ends[static_cast<size_t>(c.target)]) f |= follow_[static_cast<size_t>(s.rule)];
        if (!(f == follow_[static_cast<size_t>(c.rule)])) {
          follow_[static_cast<size_t>(c.rule)] = f;
          changed = true;
        }
      }
  }
}

}  // namespace rill::grammar
