// The token cursor shared by the statement and expression parsers: look-ahead, expectations with
// errors that name the line and the token found, and a recursion guard so that no template can
// overflow the parser's stack.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/chat/jinja_ast.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_lexer.h"

namespace rill::jinja {

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  /// Bounds the parsers' recursion (nested brackets, blocks, unary operators).
  class DepthGuard {
   public:
    explicit DepthGuard(TokenStream& s) : s_(s) {
      if (++s_.depth_ > kMaxStatementDepth) s_.error("template nested too deeply");
    }
    ~DepthGuard() { --s_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    TokenStream& s_;
  };

  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  void skip(size_t n) { pos_ = std::min(pos_ + n, toks_.size() - 1); }
  bool at_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOp && peek(ahead).text == op;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
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
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kVarEnd:
        return "'}}'";
      default:
        return "'" + t.text + "'";
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

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace rill::jinja
