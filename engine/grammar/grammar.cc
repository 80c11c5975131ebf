#include "engine/grammar/grammar.h"

#include <utility>

#include "engine/grammar/grammar_error.h"

namespace rill::grammar {

int32_t Grammar::add_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t Grammar::push(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<int32_t>(exprs_.size() - 1);
}

int32_t Grammar::empty() {
  return push(Expr{});
}

int32_t Grammar::literal(std::string_view bytes) {
  if (bytes.empty()) return empty();
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = std::string(bytes);
  return push(std::move(e));
}

int32_t Grammar::byte_set(const ByteSet& s) {
  Expr e;
  e.kind = ExprKind::kByteSet;
  e.set = s;
  return push(std::move(e));
}

int32_t Grammar::seq(std::vector<int32_t> children) {
  if (children.empty()) return empty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(children);
  return push(std::move(e));
}

int32_t Grammar::choice(std::vector<int32_t> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kChoice;  // no children: matches nothing
  e.children = std::move(children);
  return push(std::move(e));
}

int32_t Grammar::repeat(int32_t child, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return push(std::move(e));
}

int32_t Grammar::ref(int32_t rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return push(std::move(e));
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

void Grammar::check(const GrammarLimits& limits) const {
  if (rules_.size() > limits.max_rules)
    fail("grammar has " + std::to_string(rules_.size()) + " rules, more than the limit of " +
         std::to_string(limits.max_rules));
  if (exprs_.size() > limits.max_exprs)
    fail("grammar has " + std::to_string(exprs_.size()) + " expressions, more than the limit of " +
         std::to_string(limits.max_exprs));
  for (const Rule& r : rules_)
    if (r.body < 0) fail("grammar rule '" + r.name + "' is referenced but not defined");
  if (root < 0 || static_cast<size_t>(root) >= rules_.size()) fail("grammar has no root rule");
}

namespace {

std::string byte_text(uint8_t b) {
  static const char* kHex = "0123456789ABCDEF";
  if (b == '\\' || b == '"' || b == ']' || b == '-' || b == '^' || b < 0x20 || b >= 0x7f)
    return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
  return std::string(1, static_cast<char>(b));
}

std::string set_text(const ByteSet& s) {
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.test(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.test(static_cast<uint8_t>(e + 1))) ++e;
    out += byte_text(static_cast<uint8_t>(b));
    if (e > b) out += "-" + byte_text(static_cast<uint8_t>(e));
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules_) {
    out += r.name + " ::= ";
    // Explicit stack: (expr, next child) frames; expression trees may be deep.
    std::vector<std::pair<int32_t, size_t>> stack{{r.body, 0}};
    while (!stack.empty()) {
      auto& [ei, next] = stack.back();
      if (ei < 0) {
        stack.pop_back();
        continue;
      }
      const Expr& e = exprs_[static_cast<size_t>(ei)];
      switch (e.kind) {
        case ExprKind::kEmpty:
          out += "\"\"";
          stack.pop_back();
          continue;
        case ExprKind::kBytes: {
          out += "\"";
          for (char c : e.bytes) out += byte_text(static_cast<uint8_t>(c));
          out += "\"";
          stack.pop_back();
          continue;
        }
        case ExprKind::kByteSet:
          out += set_text(e.set);
          stack.pop_back();
          continue;
        case ExprKind::kRuleRef:
          out += rules_[static_cast<size_t>(e.rule)].name;
          stack.pop_back();
          continue;
        default:
          break;
      }
      if (next == 0) out += "(";
      if (next == e.children.size()) {
        out += ")";
        if (e.kind == ExprKind::kRepeat)
          out += "{" + std::to_string(e.min) + "," + (e.max < 0 ? "" : std::to_string(e.max)) + "}";
        stack.pop_back();
        continue;
      }
      if (next > 0) out += e.kind == ExprKind::kChoice ? " | " : " ";
      const int32_t child = e.children[next++];
      stack.emplace_back(child, 0);
    }
    out += "\n";
  }
  return out;
}

}  // namespace rill::grammar
