#include "engine/chat/jinja_parser.h"

#include <algorithm>

#include "engine/chat/jinja_expr_parser.h"
#include "engine/chat/jinja_token_stream.h"

namespace rill::jinja {
namespace {

// Which of caller / varargs / kwargs a macro or call-block body refers to (jinja2's
// find_undeclared): the names decide whether the macro collects extra arguments.
struct NameUse {
  bool caller = false;
  bool varargs = false;
  bool kwargs = false;
};

void find_names(const Expr* e, NameUse& use) {
  if (!e) return;
  if (e->kind == Expr::Kind::kName) {
    use.caller = use.caller || e->name == "caller";
    use.varargs = use.varargs || e->name == "varargs";
    use.kwargs = use.kwargs || e->name == "kwargs";
  }
  for (const auto& arg : e->args) find_names(arg.get(), use);
  for (const auto& [k, v] : e->kwargs) find_names(v.get(), use);
}

void find_names(const NodeList& nodes, NameUse& use) {
  for (const auto& n : nodes) {
    find_names(n->expr.get(), use);
    find_names(n->cond.get(), use);
    for (const auto& [cond, body] : n->branches) {
      find_names(cond.get(), use);
      find_names(body, use);
    }
    for (const auto& [name, fallback] : n->params) find_names(fallback.get(), use);
    find_names(n->body, use);
    find_names(n->else_body, use);
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : s_(std::move(tokens)), expr_(s_) {}

  NodeList parse() {
    std::string end;
    return parse_body({}, end);
  }

 private:
  // Parses nodes until a block tag named in `ends` (consumed up to its name, stored in `end`);
  // the last of `ends` is the closing tag an unterminated block is reported as missing.
  NodeList parse_body(const std::vector<std::string>& ends, std::string& end) {
    NodeList nodes;
    while (true) {
      const Token& t = s_.peek();
      if (t.kind == TokenKind::kEof) {
        if (!ends.empty()) s_.error("unexpected end of template, expected '" + ends.back() + "'");
        return nodes;
      }
      auto n = std::make_unique<Node>();
      n->line = t.line;
      if (t.kind == TokenKind::kText) {
        n->kind = Node::Kind::kText;
        n->text = s_.next().text;
      } else if (t.kind == TokenKind::kVarBegin) {
        s_.next();
        n->kind = Node::Kind::kOutput;
        n->expr = expr_.parse_expression();
        if (s_.peek().kind != TokenKind::kVarEnd)
          s_.error("expected '}}', got " + TokenStream::describe(s_.peek()));
        s_.next();
      } else {
        s_.next();  // {%
        const Token& name = s_.peek();
        if (name.kind != TokenKind::kName)
          s_.error("expected a tag name, got " + TokenStream::describe(name));
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          end = s_.next().text;
          return nodes;
        }
        n = parse_statement();
      }
      nodes.push_back(std::move(n));
    }
  }

  NodePtr parse_statement() {
    const TokenStream::DepthGuard guard(s_);
    const Token& t = s_.next();
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
    } else if (tag == "call") {
      parse_call_block(*n);
    } else if (tag == "with") {
      parse_with(*n);
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      s_.expect_block_end();
    } else if (tag == "generation") {
      n->kind = Node::Kind::kScope;
      s_.expect_block_end();
      n->body = parse_block_body("endgeneration");
    } else if (tag == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      n->expr = parse_filter_chain(n->line);
      s_.expect_block_end();
      n->body = parse_block_body("endfilter");
    } else {
      throw TemplateError("unsupported template tag '" + tag + "'", t.line);
    }
    return n;
  }

  NodeList parse_block_body(const std::string& end_tag) {
    std::string end;
    NodeList body = parse_body({end_tag}, end);
    s_.expect_block_end();
    return body;
  }

  void parse_if(Node& n) {
    n.kind = Node::Kind::kIf;
    while (true) {
      ExprPtr cond = expr_.parse_expression(false);
      s_.expect_block_end();
      std::string end;
      NodeList body = parse_body({"elif", "else", "endif"}, end);
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      s_.expect_block_end();
      if (end == "else") n.else_body = parse_block_body("endif");
      return;
    }
  }

  void parse_for(Node& n) {
    n.kind = Node::Kind::kFor;
    n.targets.push_back(s_.expect_name());
    while (s_.skip_op(",")) n.targets.push_back(s_.expect_name());
    if (!s_.skip_name("in")) s_.error("expected 'in', got " + TokenStream::describe(s_.peek()));
    n.expr = expr_.parse_or();
    if (s_.at_op(",")) {  // for x in a, b
      auto tuple = make_expr(Expr::Kind::kTuple, n.line);
      expr_.add_arg(*tuple, std::move(n.expr));
      while (s_.skip_op(",")) expr_.add_arg(*tuple, expr_.parse_or());
      n.expr = std::move(tuple);
    }
    if (s_.skip_name("if")) n.cond = expr_.parse_expression(false);
    n.recursive = s_.skip_name("recursive");
    s_.expect_block_end();
    std::string end;
    n.body = parse_body({"else", "endfor"}, end);
    s_.expect_block_end();
    if (end == "else") n.else_body = parse_block_body("endfor");
  }

  void parse_set(Node& n) {
    n.targets.push_back(s_.expect_name());
    if (s_.skip_op(".")) {
      n.attr = s_.expect_name();
    } else {
      while (s_.skip_op(",")) n.targets.push_back(s_.expect_name());
    }
    if (s_.peek().kind == TokenKind::kBlockEnd || s_.at_op("|")) {  // {% set x [| f] %}...
      n.kind = Node::Kind::kSetBlock;
      if (s_.skip_op("|")) n.expr = parse_filter_chain(n.line);
      s_.expect_block_end();
      n.body = parse_block_body("endset");
      return;
    }
    n.kind = Node::Kind::kSet;
    s_.expect_op("=");
    n.expr = expr_.parse_expression();
    if (s_.at_op(",")) {
      auto tuple = make_expr(Expr::Kind::kTuple, n.line);
      expr_.add_arg(*tuple, std::move(n.expr));
      while (s_.skip_op(",")) expr_.add_arg(*tuple, expr_.parse_expression());
      n.expr = std::move(tuple);
    }
    s_.expect_block_end();
  }

  // `f(args) | g | ...` applied to the placeholder the block's body is bound to.
  ExprPtr parse_filter_chain(int line) {
    ExprPtr e = expr_.parse_filter(make_expr(Expr::Kind::kName, line, kFilterInputName));
    while (s_.skip_op("|")) e = expr_.parse_filter(std::move(e));
    return e;
  }

  // "(a, b=default, ...)" of a macro or a call block.
  void parse_signature(Node& n) {
    s_.expect_op("(");
    while (!s_.skip_op(")")) {
      if (!n.params.empty()) s_.expect_op(",");
      std::string param = s_.expect_name();
      ExprPtr fallback;
      if (s_.skip_op("=")) fallback = expr_.parse_expression();
      if (param == "caller" && !fallback)
        s_.error(
            "When defining macros or call blocks the special \"caller\" argument must be omitted "
            "or be given a default.");
      n.params.emplace_back(std::move(param), std::move(fallback));
    }
  }

  static void record_name_use(Node& n) {
    NameUse use;
    find_names(n.body, use);
    n.uses_caller = use.caller;
    n.uses_varargs = use.varargs;
    n.uses_kwargs = use.kwargs;
  }

  void parse_macro(Node& n) {
    n.kind = Node::Kind::kMacro;
    n.text = s_.expect_name();
    parse_signature(n);
    s_.expect_block_end();
    n.body = parse_block_body("endmacro");
    record_name_use(n);
  }

  // {% call[(params)] macro(args) %}body{% endcall %}: body becomes `caller` inside the macro.
  void parse_call_block(Node& n) {
    n.kind = Node::Kind::kCallBlock;
    if (s_.at_op("(")) parse_signature(n);
    n.expr = expr_.parse_expression();
    if (n.expr->kind != Expr::Kind::kCall) throw TemplateError("expected call", n.line);
    s_.expect_block_end();
    n.body = parse_block_body("endcall");
    record_name_use(n);
  }

  void parse_with(Node& n) {
    n.kind = Node::Kind::kWith;
    while (s_.peek().kind != TokenKind::kBlockEnd) {
      if (!n.params.empty()) s_.expect_op(",");
      std::string name = s_.expect_name();
      s_.expect_op("=");
      n.params.emplace_back(std::move(name), expr_.parse_expression());
    }
    s_.expect_block_end();
    n.body = parse_block_body("endwith");
  }

  TokenStream s_;
  ExprParser expr_;
};

}  // namespace

NodeList parse_template(const std::string& source) {
  return Parser(tokenize(source)).parse();
}

}  // namespace rill::jinja
