#include "engine/chat/jinja_parser.h"

#include <algorithm>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_lexer.h"

namespace rill::jinja {
namespace {

ExprPtr make_expr(Expr::Kind kind, int line, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

class Parser {
  // Bounds the parser's recursion (nested brackets, blocks, unary operators), so that no
  // template can overflow the stack; evaluation recursion follows the tree's depth.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.error("template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  NodeList parse() {
    std::string end;
    NodeList body = parse_body({}, end);
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool at_op(const char* op) const { return peek().kind == TokenKind::kOp && peek().text == op; }
  bool at_name(const char* name) const {
    return peek().kind == TokenKind::kName && peek().text == name;
  }
  bool skip_op(const char* op) {
    if (!at_op(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!at_name(name)) return false;
    ++pos_;
    return true;
  }
  [[noreturn]] void error(const std::string& message) const {
    throw TemplateError(message, peek().line);
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::kEof: return "end of template";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kVarEnd: return "'}}'";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) error("expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) error("expected '%}', got " + describe(peek()));
    ++pos_;
  }

  // Parses nodes until a block tag named in `ends` (consumed up to its name, stored in `end`);
  // the last of `ends` is the closing tag an unterminated block is reported as missing.
  NodeList parse_body(const std::vector<std::string>& ends, std::string& end) {
    NodeList nodes;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEof) {
        if (!ends.empty()) error("unexpected end of template, expected '" + ends.back() + "'");
        return nodes;
      }
      if (t.kind == TokenKind::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = next().text;
        nodes.push_back(std::move(n));
      } else if (t.kind == TokenKind::kVarBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        n->expr = parse_expression();
        if (peek().kind != TokenKind::kVarEnd) error("expected '}}', got " + describe(peek()));
        next();
        nodes.push_back(std::move(n));
      } else {
        next();  // {%
        const Token& name = peek();
        if (name.kind != TokenKind::kName) error("expected a tag name, got " + describe(name));
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          end = next().text;
          return nodes;
        }
        nodes.push_back(parse_statement());
      }
    }
  }

  NodePtr parse_statement() {
    const DepthGuard guard(*this);
    const Token& t = next();
    auto n = std::make_unique<Node>();
    n->line = t.line;
    const std::string& tag = t.text;
    if (tag == "if") {
      parse_if(*n);
    } else if (tag == "for") {
      parse_for(*n);
    } else if (tag == "set") {
      parse_set(*n);
    } else if (tag == "macro") {
      parse_macro(*n);
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
    } else if (tag == "generation") {
      n->kind = Node::Kind::kScope;
      expect_block_end();
      n->body = parse_block_body("endgeneration");
    } else if (tag == "filter") {
      parse_filter_block(*n);
    } else {
      throw TemplateError("unsupported template tag '" + tag + "'", t.line);
    }
    return n;
  }

  NodeList parse_block_body(const std::string& end_tag) {
    std::string end;
    NodeList body = parse_body({end_tag}, end);
    expect_block_end();
    return body;
  }

  void parse_if(Node& n) {
    n.kind = Node::Kind::kIf;
    while (true) {
      ExprPtr cond = parse_expression(false);
      expect_block_end();
      std::string end;
      NodeList body = parse_body({"elif", "else", "endif"}, end);
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        n.else_body = parse_block_body("endif");
        return;
      }
      expect_block_end();
      return;
    }
  }

  void parse_for(Node& n) {
    n.kind = Node::Kind::kFor;
    n.targets.push_back(expect_name());
    while (skip_op(",")) n.targets.push_back(expect_name());
    if (!skip_name("in")) error("expected 'in', got " + describe(peek()));
    n.expr = parse_or();
    if (at_op(",")) {  // for x in a, b
      auto tuple = make_expr(Expr::Kind::kTuple, n.line);
      tuple->args.push_back(std::move(n.expr));
      while (skip_op(",")) tuple->args.push_back(parse_or());
      n.expr = std::move(tuple);
    }
    if (skip_name("if")) n.cond = parse_expression(false);
    if (at_name("recursive")) error("recursive loops are not supported");
    expect_block_end();
    std::string end;
    n.body = parse_body({"else", "endfor"}, end);
    if (end == "else") {
      expect_block_end();
      n.else_body = parse_block_body("endfor");
    } else {
      expect_block_end();
    }
  }

  void parse_set(Node& n) {
    n.targets.push_back(expect_name());
    if (skip_op(".")) {
      n.attr = expect_name();
    } else {
      while (skip_op(",")) n.targets.push_back(expect_name());
    }
    if (peek().kind == TokenKind::kBlockEnd) {
      if (n.targets.size() != 1 || !n.attr.empty()) error("block set takes one name");
      n.kind = Node::Kind::kSetBlock;
      next();
      n.body = parse_block_body("endset");
      return;
    }
    n.kind = Node::Kind::kSet;
    expect_op("=");
    n.expr = parse_expression();
    if (at_op(",")) {
      auto tuple = make_expr(Expr::Kind::kTuple, n.line);
      tuple->args.push_back(std::move(n.expr));
      while (skip_op(",")) tuple->args.push_back(parse_expression());
      n.expr = std::move(tuple);
    }
    expect_block_end();
  }

  void parse_macro(Node& n) {
    n.kind = Node::Kind::kMacro;
    n.text = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!n.params.empty()) expect_op(",");
      std::string param = expect_name();
      ExprPtr fallback;
      if (skip_op("=")) fallback = parse_expression();
      n.params.emplace_back(std::move(param), std::move(fallback));
    }
    expect_block_end();
    n.body = parse_block_body("endmacro");
  }

  void parse_filter_block(Node& n) {
    n.kind = Node::Kind::kFilterBlock;
    ExprPtr placeholder = make_expr(Expr::Kind::kName, n.line, kFilterInputName);
    n.expr = parse_filter(std::move(placeholder));
    while (skip_op("|")) n.expr = parse_filter(std::move(n.expr), false);
    expect_block_end();
    n.body = parse_block_body("endfilter");
  }

  // ---- expressions (jinja2's precedence, lowest first) ----

  ExprPtr parse_expression(bool with_condexpr = true) {
    const DepthGuard guard(*this);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (at_name("if")) {
      const int line = next().line;
      auto cond = make_expr(Expr::Kind::kCond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(e));
      cond->args.push_back(std::move(otherwise));
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(Expr::Kind::kBinary, line, op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    const DepthGuard guard(*this);
    if (at_name("not")) {
      auto e = make_expr(Expr::Kind::kUnary, next().line, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.kind == TokenKind::kOp &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" ||
           t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (at_name("in")) {
        op = "in";
        next();
      } else if (at_name("not") && peek(1).kind == TokenKind::kName && peek(1).text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(Expr::Kind::kCompare, t.line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (at_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), parse_unary(), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    const DepthGuard guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      e = make_expr(Expr::Kind::kUnary, t.line, t.text);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.kind == TokenKind::kName) {
      next();
      auto lit = make_expr(Expr::Kind::kLiteral, t.line);
      if (t.text == "true" || t.text == "True") lit->literal = Value(true);
      else if (t.text == "false" || t.text == "False") lit->literal = Value(false);
      else if (t.text == "none" || t.text == "None") lit->literal = Value(None{});
      else return make_expr(Expr::Kind::kName, t.line, t.text);
      return lit;
    }
    if (t.kind == TokenKind::kString) {
      auto lit = make_expr(Expr::Kind::kLiteral, t.line);
      std::string s;
      while (peek().kind == TokenKind::kString) s += next().text;  // "a" "b" concatenates
      lit->literal = Value(std::move(s));
      return lit;
    }
    if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
      next();
      auto lit = make_expr(Expr::Kind::kLiteral, t.line);
      try {
        lit->literal = t.kind == TokenKind::kInt ? Value(static_cast<int64_t>(std::stoll(t.text)))
                                                 : Value(std::stod(t.text));
      } catch (const std::exception&) {
        throw TemplateError("number out of range: " + t.text, t.line);
      }
      return lit;
    }
    if (at_op("(")) return parse_paren();
    if (at_op("[")) {
      auto list = make_expr(Expr::Kind::kList, next().line);
      while (!skip_op("]")) {
        if (!list->args.empty()) expect_op(",");
        if (skip_op("]")) break;  // trailing comma
        list->args.push_back(parse_expression());
      }
      return list;
    }
    if (at_op("{")) {
      auto dict = make_expr(Expr::Kind::kDict, next().line);
      while (!skip_op("}")) {
        if (!dict->args.empty()) expect_op(",");
        if (skip_op("}")) break;
        dict->args.push_back(parse_expression());
        expect_op(":");
        dict->args.push_back(parse_expression());
      }
      return dict;
    }
    error("unexpected " + describe(t));
  }

  ExprPtr parse_paren() {
    const int line = next().line;
    if (skip_op(")")) return make_expr(Expr::Kind::kTuple, line);
    ExprPtr e = parse_expression();
    if (!at_op(",")) {
      expect_op(")");
      return e;
    }
    auto tuple = make_expr(Expr::Kind::kTuple, line);
    tuple->args.push_back(std::move(e));
    while (skip_op(",")) {
      if (at_op(")")) break;
      tuple->args.push_back(parse_expression());
    }
    expect_op(")");
    return tuple;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        if (peek().kind == TokenKind::kInt) {
          auto item = make_expr(Expr::Kind::kItem, line);
          auto index = make_expr(Expr::Kind::kLiteral, line);
          if (peek().text.size() > 18) error("number out of range: " + peek().text);
          index->literal = Value(static_cast<int64_t>(std::stoll(next().text)));
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(index));
          e = std::move(item);
        } else {
          auto attr = make_expr(Expr::Kind::kAttr, line, expect_name());
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const int line = next().line;  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!at_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) error("too many ':' in a slice");
        continue;
      }
      if (parts[colons]) error("expected ']' or ':', got " + describe(peek()));
      parts[colons] = parse_expression();
    }
    next();  // ]
    if (colons == 0) {
      if (!parts[0]) error("empty subscript");
      auto item = make_expr(Expr::Kind::kItem, line);
      item->args.push_back(std::move(obj));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = make_expr(Expr::Kind::kSlice, line);
    slice->args.push_back(std::move(obj));
    for (auto& p : parts) slice->args.push_back(std::move(p));
    return slice;
  }

  // Parses "(args)" into e->args (after any already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (at_op("*") || at_op("**")) error("*args and **kwargs in calls are not supported");
      if (peek().kind == TokenKind::kName && peek(1).kind == TokenKind::kOp &&
          peek(1).text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) error("positional argument after keyword argument");
        e.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make_expr(Expr::Kind::kCall, peek().line);
    call->args.push_back(std::move(callee));
    parse_call_args(*call);
    return call;
  }

  ExprPtr parse_filter(ExprPtr operand, bool expect_pipe = false) {
    if (expect_pipe) expect_op("|");
    const int line = peek().line;
    std::string name = expect_name();
    if (!is_filter(name)) throw TemplateError("no filter named '" + name + "'", line);
    auto f = make_expr(Expr::Kind::kFilter, line, std::move(name));
    f->args.push_back(std::move(operand));
    if (at_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_test(ExprPtr operand) {
    const int line = next().line;  // is
    const bool negated = skip_name("not");
    std::string name = expect_name();
    if (!is_test(name)) throw TemplateError("no test named '" + name + "'", line);
    auto t = make_expr(Expr::Kind::kTest, line, std::move(name));
    t->negated = negated;
    t->args.push_back(std::move(operand));
    const Token& p = peek();
    if (at_op("(")) {
      parse_call_args(*t);
    } else if ((p.kind == TokenKind::kName || p.kind == TokenKind::kString ||
                p.kind == TokenKind::kInt || p.kind == TokenKind::kFloat || at_op("[") ||
                at_op("{")) &&
               !(at_name("else") || at_name("or") || at_name("and") || at_name("if"))) {
      t->args.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_filter(std::move(e));
      } else if (at_name("is")) {
        e = parse_test(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  static constexpr int kMaxDepth = 200;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

NodeList parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

}  // namespace rill::jinja
