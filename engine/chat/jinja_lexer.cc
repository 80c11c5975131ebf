#include "engine/chat/jinja_lexer.h"

#include <cctype>
#include <cstdint>

#include "engine/chat/jinja_error.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text));
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(std::move(text));
      pos_ = tag;
      const size_t start = pos_;
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && lex_raw()) {
        // the raw block's text was emitted as data
      } else {
        lex_tag(kind == '{');
      }
      line_starting = pos_ > start && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({TokenKind::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  void emit_text(std::string text) {
    if (text.empty()) return;
    tokens_.push_back({TokenKind::kText, text, line_});
    for (char c : text) line_ += c == '\n';
  }

  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < src_.size(); ++i) line_ += src_[pos_++] == '\n';
  }

  // After a closing tag: '-' strips all following whitespace, trim_blocks drops one newline.
  void after_close(char sign, bool trim) {
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
    } else if (sign != '+' && trim && pos_ < src_.size() && src_[pos_] == '\n') {
      advance(1);
    }
  }

  void lex_comment() {
    const int start_line = line_;
    const size_t end = src_.find("#}", pos_ + 2);
    if (end == std::string::npos) throw TemplateError("unterminated comment", start_line);
    const char sign = end > pos_ + 2 ? src_[end - 1] : '\0';
    advance(end + 2 - pos_);
    after_close(sign == '-' || sign == '+' ? sign : '\0', true);
  }

  // Matches "{%[-+]? name [-+]?%}" at `at` for a bare tag (raw / endraw); returns the index after
  // it, or npos. `open_sign` and `close_sign` get the whitespace-control characters.
  size_t match_bare_tag(size_t at, const char* name, char& open_sign, char& close_sign) const {
    if (src_.compare(at, 2, "{%") != 0) return std::string::npos;
    size_t i = at + 2;
    open_sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i++] : '\0';
    while (i < src_.size() && is_space(src_[i])) ++i;
    const size_t n = std::char_traits<char>::length(name);
    if (src_.compare(i, n, name) != 0) return std::string::npos;
    i += n;
    while (i < src_.size() && is_space(src_[i])) ++i;
    close_sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i++] : '\0';
    if (src_.compare(i, 2, "%}") != 0) return std::string::npos;
    return i + 2;
  }

  // {% raw %}...{% endraw %}: the text in between is data, tags and all. As in jinja2, no
  // newline is trimmed after the raw tag itself ("-%}" strips whitespace), lstrip_blocks and
  // "{%-" apply before endraw, and trim_blocks after it.
  bool lex_raw() {
    char open_sign = 0, close_sign = 0;
    const size_t begin_end = match_bare_tag(pos_, "raw", open_sign, close_sign);
    if (begin_end == std::string::npos) return false;
    const int start_line = line_;
    advance(begin_end - pos_);
    if (close_sign == '-')
      while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
    const bool line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    size_t end_at = pos_;
    size_t end_end = std::string::npos;
    char end_open = 0, end_close = 0;
    for (; (end_at = src_.find("{%", end_at)) != std::string::npos; ++end_at) {
      end_end = match_bare_tag(end_at, "endraw", end_open, end_close);
      if (end_end != std::string::npos) break;
    }
    if (end_at == std::string::npos)
      throw TemplateError("Missing end of raw directive", start_line);
    std::string text = src_.substr(pos_, end_at - pos_);
    if (end_open == '-') {
      size_t keep = text.size();
      while (keep > 0 && is_space(text[keep - 1])) --keep;
      text.resize(keep);
    } else if (end_open != '+') {
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      bool blank = true;
      for (size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
      if ((l_pos > 0 || line_starting) && blank) text.resize(l_pos);
    }
    const size_t consumed = end_at - pos_;
    tokens_.push_back({TokenKind::kText, text, line_});
    advance(consumed);
    advance(end_end - pos_);
    after_close(end_close, true);
    if (text.empty()) tokens_.pop_back();
    return true;
  }

  void lex_tag(bool is_var) {
    const int start_line = line_;
    tokens_.push_back({is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", line_});
    advance(2);
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance(1);
    const char close = is_var ? '}' : '%';
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance(1);
      if (pos_ >= src_.size())
        throw TemplateError(is_var ? "unexpected end of template, expected '}}'"
                                   : "unexpected end of template, expected '%}'",
                            start_line);
      if (depth == 0) {
        char sign = '\0';
        size_t at = pos_;
        if ((src_[at] == '-' || src_[at] == '+') && at + 1 < src_.size()) sign = src_[at++];
        if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
          tokens_.push_back({is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", line_});
          advance(at + 2 - pos_);
          after_close(sign, !is_var);
          return;
        }
      }
      lex_expression_token(depth);
    }
  }

  void lex_expression_token(int& depth) {
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
      tokens_.push_back({TokenKind::kName, src_.substr(pos_, end - pos_), line_});
      advance(end - pos_);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (c == '\'' || c == '"') {
      lex_string(c);
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      for (const char* op : kTwo) {
        if (src_.compare(pos_, 2, op) == 0) {
          tokens_.push_back({TokenKind::kOp, op, line_});
          advance(2);
          return;
        }
      }
      if (std::string("+-*/%~<>=()[]{},.:|").find(c) == std::string::npos)
        throw TemplateError(std::string("unexpected character '") + c + "'", line_);
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      tokens_.push_back({TokenKind::kOp, std::string(1, c), line_});
      advance(1);
    }
  }

  void lex_number() {
    size_t end = pos_;
    auto digits = [&] {
      while (end < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    bool is_float = false;
    // `foo.0.1` is two subscripts, not a float (jinja2's lookbehind for '.').
    const bool after_dot =
        !tokens_.empty() && tokens_.back().kind == TokenKind::kOp && tokens_.back().text == ".";
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, text, line_});
    advance(end - pos_);
  }

  void lex_string(char quote) {
    const int start_line = line_;
    std::string out;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= src_.size()) throw TemplateError("unterminated string", start_line);
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out += c;
        ++i;
        continue;
      }
      i = unescape(i, out);
    }
    tokens_.push_back({TokenKind::kString, out, start_line});
    advance(i + 1 - pos_);
  }

  // Python string escapes at src_[i] == '\\'; returns the index after the escape.
  size_t unescape(size_t i, std::string& out) const {
    const char e = src_[i + 1];
    switch (e) {
      case 'n':
        out += '\n';
        return i + 2;
      case 't':
        out += '\t';
        return i + 2;
      case 'r':
        out += '\r';
        return i + 2;
      case '\\':
        out += '\\';
        return i + 2;
      case '\'':
        out += '\'';
        return i + 2;
      case '"':
        out += '"';
        return i + 2;
      case 'a':
        out += '\a';
        return i + 2;
      case 'b':
        out += '\b';
        return i + 2;
      case 'f':
        out += '\f';
        return i + 2;
      case 'v':
        out += '\v';
        return i + 2;
      case '0':
        out += '\0';
        return i + 2;
      case '\n':
        return i + 2;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + 2 + n > src_.size()) break;
        const std::string hex = src_.substr(i + 2, n);
        for (char h : hex)
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            throw TemplateError("bad escape", line_);
        const auto cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
        // Python refuses \U escapes past U+10FFFF; a lone surrogate has no UTF-8 form and
        // renders as U+FFFD.
        if (cp > utf8::kMaxCodePoint) throw TemplateError("bad escape", line_);
        utf8::append(out, cp);
        return i + 2 + n;
      }
      default:
        break;
    }
    out += '\\';  // unknown escapes keep their backslash, as in Python
    return i + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(source).run();
}

}  // namespace rill::jinja
