// Jinja expression parser: jinja2's grammar and precedence (conditional expressions, or/and/not,
// comparisons, + - ~ * / // % **, unary signs, filters, tests, calls, subscripts, slices,
// literals). Filter and test names are not checked here: like jinja2 inside an {% if %}, an
// unknown one fails only when it is evaluated.
#pragma once

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_token_stream.h"

namespace rill::jinja {

class ExprParser {
 public:
  explicit ExprParser(TokenStream& s) : s_(s) {}

  /// A full expression; with_condexpr=false stops before `x if y else z` (for if/elif tests).
  ExprPtr parse_expression(bool with_condexpr = true);
  /// An or-expression (for-loop iterables, where `if` starts the loop filter).
  ExprPtr parse_or();
  /// `name[(args)]` applied to `operand`, the pipe already consumed.
  ExprPtr parse_filter(ExprPtr operand);
  /// Parses "(args)" into e.args (after any already there) and e.kwargs.
  void parse_call_args(Expr& e);

  /// Makes `child` the next argument of `parent`, keeping parent.depth and refusing trees
  /// deeper than kMaxExprDepth.
  void add_arg(Expr& parent, ExprPtr child);
  void add_kwarg(Expr& parent, std::string name, ExprPtr value);

 private:
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line);
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_number();
  ExprPtr parse_collection();
  ExprPtr parse_paren();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_test(ExprPtr operand);
  ExprPtr parse_filter_expr(ExprPtr e);

  TokenStream& s_;
};

/// A new expression node.
ExprPtr make_expr(Expr::Kind kind, int line, std::string name = {});

}  // namespace rill::jinja
