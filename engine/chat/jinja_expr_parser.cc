#include "engine/chat/jinja_expr_parser.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

namespace rill::jinja {

ExprPtr make_expr(Expr::Kind kind, int line, std::string name) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

void ExprParser::add_arg(Expr& parent, ExprPtr child) {
  if (child) {
    parent.depth = std::max(parent.depth, child->depth + 1);
    if (parent.depth > kMaxExprDepth)
      throw TemplateError(
          "expression nested too deeply (more than " + std::to_string(kMaxExprDepth) + " levels)",
          parent.line);
  }
  parent.args.push_back(std::move(child));
}

void ExprParser::add_kwarg(Expr& parent, std::string name, ExprPtr value) {
  parent.depth = std::max(parent.depth, value->depth + 1);
  if (parent.depth > kMaxExprDepth)
    throw TemplateError(
        "expression nested too deeply (more than " + std::to_string(kMaxExprDepth) + " levels)",
        parent.line);
  parent.kwargs.emplace_back(std::move(name), std::move(value));
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  const TokenStream::DepthGuard guard(s_);
  ExprPtr e = parse_or();
  if (!with_condexpr) return e;
  while (s_.at_name("if")) {
    const int line = s_.next().line;
    auto cond = make_expr(Expr::Kind::kCond, line);
    ExprPtr test = parse_or();
    ExprPtr otherwise = s_.skip_name("else") ? parse_expression() : nullptr;
    add_arg(*cond, std::move(test));
    add_arg(*cond, std::move(e));
    add_arg(*cond, std::move(otherwise));
    e = std::move(cond);
  }
  return e;
}

ExprPtr ExprParser::binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
  auto e = make_expr(Expr::Kind::kBinary, line, op);
  add_arg(*e, std::move(left));
  add_arg(*e, std::move(right));
  return e;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr e = parse_and();
  while (s_.at_name("or")) {
    const int line = s_.next().line;
    e = binary("or", std::move(e), parse_and(), line);
  }
  return e;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr e = parse_not();
  while (s_.at_name("and")) {
    const int line = s_.next().line;
    e = binary("and", std::move(e), parse_not(), line);
  }
  return e;
}

ExprPtr ExprParser::parse_not() {
  const TokenStream::DepthGuard guard(s_);
  if (s_.at_name("not")) {
    auto e = make_expr(Expr::Kind::kUnary, s_.next().line, "not");
    add_arg(*e, parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    const Token& t = s_.peek();
    if (t.kind == TokenKind::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                     t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      s_.next();
    } else if (s_.at_name("in")) {
      op = "in";
      s_.next();
    } else if (s_.at_name("not") && s_.at_name("in", 1)) {
      op = "not in";
      s_.skip(2);
    } else {
      break;
    }
    if (!cmp) {
      cmp = make_expr(Expr::Kind::kCompare, t.line);
      add_arg(*cmp, std::move(first));
    }
    cmp->ops.push_back(op);
    add_arg(*cmp, parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr e = parse_concat();
  while (s_.at_op("+") || s_.at_op("-")) {
    const Token& t = s_.next();
    e = binary(t.text, std::move(e), parse_concat(), t.line);
  }
  return e;
}

ExprPtr ExprParser::parse_concat() {
  ExprPtr e = parse_math2();
  while (s_.at_op("~")) {
    const int line = s_.next().line;
    e = binary("~", std::move(e), parse_math2(), line);
  }
  return e;
}

ExprPtr ExprParser::parse_math2() {
  ExprPtr e = parse_pow();
  while (s_.at_op("*") || s_.at_op("/") || s_.at_op("//") || s_.at_op("%")) {
    const Token& t = s_.next();
    e = binary(t.text, std::move(e), parse_pow(), t.line);
  }
  return e;
}

ExprPtr ExprParser::parse_pow() {
  ExprPtr e = parse_unary();
  while (s_.at_op("**")) {
    const int line = s_.next().line;
    e = binary("**", std::move(e), parse_unary(), line);
  }
  return e;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  const TokenStream::DepthGuard guard(s_);
  ExprPtr e;
  if (s_.at_op("-") || s_.at_op("+")) {
    const Token& t = s_.next();
    e = make_expr(Expr::Kind::kUnary, t.line, t.text);
    add_arg(*e, parse_unary(false));
  } else {
    e = parse_postfix(parse_primary());
  }
  return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
}

ExprPtr ExprParser::parse_number() {
  const Token& t = s_.next();
  auto lit = make_expr(Expr::Kind::kLiteral, t.line);
  if (t.kind == TokenKind::kFloat) {
    lit->literal = Value(std::strtod(t.text.c_str(), nullptr));  // 1e400 is inf, as in Python
    return lit;
  }
  if (t.text.size() > 4300)  // Python's default limit for str -> int conversions
    throw TemplateError("integer literal too large (more than 4300 digits)", t.line);
  const std::optional<BigInt> n = BigInt::parse(t.text);  // ints of any size, as in Python
  if (!n) throw TemplateError("invalid number: " + t.text, t.line);
  lit->literal = Value(*n);
  return lit;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = s_.peek();
  if (t.kind == TokenKind::kName) {
    s_.next();
    auto lit = make_expr(Expr::Kind::kLiteral, t.line);
    if (t.text == "true" || t.text == "True")
      lit->literal = Value(true);
    else if (t.text == "false" || t.text == "False")
      lit->literal = Value(false);
    else if (t.text == "none" || t.text == "None")
      lit->literal = Value(None{});
    else
      return make_expr(Expr::Kind::kName, t.line, t.text);
    return lit;
  }
  if (t.kind == TokenKind::kString) {
    auto lit = make_expr(Expr::Kind::kLiteral, t.line);
    std::string text;
    while (s_.peek().kind == TokenKind::kString) text += s_.next().text;  // "a" "b" concatenates
    lit->literal = Value(std::move(text));
    return lit;
  }
  if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) return parse_number();
  if (s_.at_op("(")) return parse_paren();
  if (s_.at_op("[") || s_.at_op("{")) return parse_collection();
  s_.error("unexpected " + TokenStream::describe(t));
}

ExprPtr ExprParser::parse_collection() {
  if (s_.at_op("[")) {
    auto list = make_expr(Expr::Kind::kList, s_.next().line);
    while (!s_.skip_op("]")) {
      if (!list->args.empty()) s_.expect_op(",");
      if (s_.skip_op("]")) break;  // trailing comma
      add_arg(*list, parse_expression());
    }
    return list;
  }
  auto dict = make_expr(Expr::Kind::kDict, s_.next().line);
  while (!s_.skip_op("}")) {
    if (!dict->args.empty()) s_.expect_op(",");
    if (s_.skip_op("}")) break;
    add_arg(*dict, parse_expression());
    s_.expect_op(":");
    add_arg(*dict, parse_expression());
  }
  return dict;
}

ExprPtr ExprParser::parse_paren() {
  const int line = s_.next().line;
  if (s_.skip_op(")")) return make_expr(Expr::Kind::kTuple, line);
  ExprPtr e = parse_expression();
  if (!s_.at_op(",")) {
    s_.expect_op(")");
    return e;
  }
  auto tuple = make_expr(Expr::Kind::kTuple, line);
  add_arg(*tuple, std::move(e));
  while (s_.skip_op(",")) {
    if (s_.at_op(")")) break;
    add_arg(*tuple, parse_expression());
  }
  s_.expect_op(")");
  return tuple;
}

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
  while (true) {
    if (s_.at_op(".")) {
      const int line = s_.next().line;
      if (s_.peek().kind == TokenKind::kInt) {  // foo.0 is foo[0]
        auto item = make_expr(Expr::Kind::kItem, line);
        auto index = make_expr(Expr::Kind::kLiteral, line);
        if (s_.peek().text.size() > 4300) s_.error("integer literal too large");
        const std::optional<BigInt> n = BigInt::parse(s_.next().text);
        index->literal = Value(*n);
        add_arg(*item, std::move(e));
        add_arg(*item, std::move(index));
        e = std::move(item);
      } else {
        auto attr = make_expr(Expr::Kind::kAttr, line, s_.expect_name());
        add_arg(*attr, std::move(e));
        e = std::move(attr);
      }
    } else if (s_.at_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (s_.at_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr obj) {
  const int line = s_.next().line;  // [
  ExprPtr parts[3];
  int colons = 0;
  while (!s_.at_op("]")) {
    if (s_.skip_op(":")) {
      if (++colons > 2) s_.error("too many ':' in a slice");
      continue;
    }
    if (parts[colons]) s_.error("expected ']' or ':', got " + TokenStream::describe(s_.peek()));
    parts[colons] = parse_expression();
  }
  s_.next();  // ]
  if (colons == 0) {
    if (!parts[0]) s_.error("empty subscript");
    auto item = make_expr(Expr::Kind::kItem, line);
    add_arg(*item, std::move(obj));
    add_arg(*item, std::move(parts[0]));
    return item;
  }
  auto slice = make_expr(Expr::Kind::kSlice, line);
  add_arg(*slice, std::move(obj));
  for (auto& p : parts) add_arg(*slice, std::move(p));
  return slice;
}

void ExprParser::parse_call_args(Expr& e) {
  s_.expect_op("(");
  bool first = true;
  while (!s_.skip_op(")")) {
    if (!first) s_.expect_op(",");
    first = false;
    if (s_.skip_op(")")) break;
    if (s_.at_op("*") || s_.at_op("**")) s_.error("*args and **kwargs in calls are not supported");
    if (s_.peek().kind == TokenKind::kName && s_.at_op("=", 1)) {
      std::string key = s_.next().text;
      s_.next();
      add_kwarg(e, std::move(key), parse_expression());
    } else {
      if (!e.kwargs.empty()) s_.error("positional argument after keyword argument");
      add_arg(e, parse_expression());
    }
  }
}

ExprPtr ExprParser::parse_call(ExprPtr callee) {
  auto call = make_expr(Expr::Kind::kCall, s_.peek().line);
  add_arg(*call, std::move(callee));
  parse_call_args(*call);
  return call;
}

ExprPtr ExprParser::parse_filter(ExprPtr operand) {
  const int line = s_.peek().line;
  auto f = make_expr(Expr::Kind::kFilter, line, s_.expect_name());
  add_arg(*f, std::move(operand));
  if (s_.at_op("(")) parse_call_args(*f);
  return f;
}

ExprPtr ExprParser::parse_test(ExprPtr operand) {
  const int line = s_.next().line;  // is
  const bool negated = s_.skip_name("not");
  auto t = make_expr(Expr::Kind::kTest, line, s_.expect_name());
  t->negated = negated;
  add_arg(*t, std::move(operand));
  const Token& p = s_.peek();
  if (s_.at_op("(")) {
    parse_call_args(*t);
  } else if ((p.kind == TokenKind::kName || p.kind == TokenKind::kString ||
              p.kind == TokenKind::kInt || p.kind == TokenKind::kFloat || s_.at_op("[") ||
              s_.at_op("{")) &&
             !(s_.at_name("else") || s_.at_name("or") || s_.at_name("and") || s_.at_name("if"))) {
    add_arg(*t, parse_postfix(parse_primary()));  // `x is divisibleby 3`
  }
  return t;
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (s_.skip_op("|")) {
      e = parse_filter(std::move(e));
    } else if (s_.at_name("is")) {
      e = parse_test(std::move(e));
    } else if (s_.at_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

}  // namespace rill::jinja
