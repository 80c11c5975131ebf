// Jinja syntax tree: expressions (Expr) and statements (Node). Each node keeps the template line
// it starts on, so run-time errors can name it. Trees are bounded: expressions nest at most
// kMaxExprDepth deep (chains like a|f|f|f... included) and statements kMaxStatementDepth, so
// evaluating or destroying a tree never recurses further than that.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja_value.h"

namespace rill::jinja {

/// The name a {% filter %} or filtered {% set %} block's body is bound to (no template can
/// spell it).
inline constexpr const char* kFilterInputName = " filter input";

inline constexpr int kMaxExprDepth = 300;
inline constexpr int kMaxStatementDepth = 200;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KwargExprs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items
    kDict,     // args: key0, value0, key1, value1, ...
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts are null
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)
    kTest,     // args[0] is [not] name(args[1:])
    kUnary,    // name: "not", "-", "+"; args[0]
    kBinary,   // name: the operator ("+", "and", "in", "not in", "==", ...); args[0], args[1]
    kCompare,  // chained comparison: args[0] ops[0] args[1] ops[1] args[2] ...
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null: undefined)
  };
  Kind kind;
  int line;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  KwargExprs kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest: `is not`
  int depth = 1;                 // 1 + the deepest argument's depth
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body); else_body
    kFor,       // for targets in expr [if cond]: body; else_body
    kSet,       // set targets = expr, or set targets[0].attr = expr when attr is not empty
    kSetBlock,  // set targets[0][.attr] [| filters: expr, operand a placeholder] %} body {% endset
    kMacro,     // macro text(params) body
    kBreak,
    kContinue,
    kScope,        // a body rendered in place: {% generation %}
    kFilterBlock,  // {% filter expr %} body: expr is a kFilter whose operand is a placeholder
    kWith,         // with params (name = value, evaluated outside) body, in its own scope
    kCallBlock,    // call(params) expr: expr is a kCall; body is the `caller` macro's body
  };
  Kind kind;
  int line;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body;
  NodeList else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro / caller parameters, defaults
  bool recursive = false;  // kFor: `recursive`, the body may call loop(items)
  // kMacro / kCallBlock: whether the (caller's) body refers to these, which decides whether
  // extra arguments are collected or refused, as in jinja2.
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace rill::jinja
