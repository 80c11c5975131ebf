#include "engine/grammar/gbnf.h"

#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/utf8_class.h"
#include "engine/util/utf8.h"

namespace rill::grammar {

namespace {

struct Frame {
  std::vector<int32_t> alts;
  std::vector<int32_t> seq;
  size_t open_at = 0;
};

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(Grammar& g, std::string_view t, const GrammarLimits& l) : g_(g), t_(t), limits_(l) {}

  void run() {
    while (true) {
      skip_space(true);
      if (pos_ >= t_.size()) break;
      const size_t at = pos_;
      const std::string name = read_name();
      if (name.empty()) error(at, "expected a rule name");
      skip_space(false);
      if (t_.substr(pos_, 3) != "::=") error(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t rule = rule_id(name);
      if (g_.rules()[static_cast<size_t>(rule)].body >= 0)
        error(at, "rule '" + name + "' defined twice");
      g_.define(rule, alternatives());
    }
    for (const Rule& r : g_.rules())
      if (r.body < 0) fail("grammar: rule '" + r.name + "' is used but not defined");
    const int32_t root = g_.find_rule("root");
    if (root < 0) fail("grammar: no 'root' rule");
    g_.root = root;
  }

 private:
  [[noreturn]] void error(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  // Skips blanks and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t b = pos_;
    while (pos_ < t_.size() && is_name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(b, pos_ - b));
  }

  int32_t rule_id(const std::string& name) {
    const int32_t r = g_.find_rule(name);
    if (r >= 0) return r;
    if (g_.rules().size() >= limits_.max_rules)
      fail("grammar has more rules than the limit of " + std::to_string(limits_.max_rules));
    return g_.add_rule(name);
  }

  // A newline at depth 0 ends the rule unless the next non-blank line starts with '|'.
  bool rule_continues() {
    size_t p = pos_;
    while (p < t_.size()) {
      const char c = t_[p];
      if (c == '#') {
        while (p < t_.size() && t_[p] != '\n') ++p;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++p;
      } else {
        break;
      }
    }
    if (p < t_.size() && t_[p] == '|') {
      pos_ = p;
      return true;
    }
    return false;
  }

  int32_t alternatives() {
    std::vector<Frame> stack(1);
    skip_space(true);
    while (true) {
      skip_space(stack.size() > 1);
      if (pos_ >= t_.size() || t_[pos_] == '\n') {
        if (stack.size() > 1 && pos_ >= t_.size()) error(stack.back().open_at, "unbalanced '('");
        if (pos_ < t_.size() && rule_continues()) continue;
        break;
      }
      const size_t at = pos_;
      const char c = t_[pos_];
      Frame& f = stack.back();
      if (c == '|') {
        ++pos_;
        f.alts.push_back(g_.seq(std::move(f.seq)));
        f.seq.clear();
        skip_space(true);
        continue;
      }
      if (c == '(') {
        ++pos_;
        stack.emplace_back();
        stack.back().open_at = at;
        continue;
      }
      if (c == ')') {
        if (stack.size() == 1) error(at, "unbalanced ')'");
        ++pos_;
        Frame done = std::move(stack.back());
        stack.pop_back();
        done.alts.push_back(g_.seq(std::move(done.seq)));
        stack.back().seq.push_back(g_.choice(std::move(done.alts)));
        continue;
      }
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (f.seq.empty()) error(at, std::string("'") + c + "' follows nothing");
        f.seq.back() = quantified(f.seq.back());
        continue;
      }
      f.seq.push_back(atom());
    }
    Frame& f = stack.back();
    f.alts.push_back(g_.seq(std::move(f.seq)));
    return g_.choice(std::move(f.alts));
  }

  int32_t number() {
    const size_t at = pos_;
    int64_t v = 0;
    if (pos_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[pos_]))) return -1;
    while (pos_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[pos_]))) {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > limits_.max_repeat)
        error(at, "repetition bound above the limit of " + std::to_string(limits_.max_repeat));
    }
    return static_cast<int32_t>(v);
  }

  int32_t quantified(int32_t e) {
    const size_t at = pos_;
    const char c = t_[pos_++];
    if (c == '*') return g_.repeat(e, 0, -1);
    if (c == '+') return g_.repeat(e, 1, -1);
    if (c == '?') return g_.repeat(e, 0, 1);
    skip_space(false);
    int32_t lo = number(), hi = lo;
    if (lo < 0) error(at, "expected a number after '{'");
    skip_space(false);
    if (pos_ < t_.size() && t_[pos_] == ',') {
      ++pos_;
      skip_space(false);
      hi = number();
      skip_space(false);
    }
    if (pos_ >= t_.size() || t_[pos_] != '}') error(at, "expected '}'");
    ++pos_;
    if (hi >= 0 && hi < lo) error(at, "repetition {m,n} with n < m");
    return g_.repeat(e, lo, hi);
  }

  uint32_t hex(size_t n, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      if (pos_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[pos_])))
        error(at, "bad hex escape");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(t_[pos_++])));
      v = v * 16 + static_cast<uint32_t>(
                       std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : h - 'a' + 10);
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) error(at, "code point out of range");
    return v;
  }

  // One (possibly escaped) character of a literal or class.
  uint32_t character() {
    const size_t at = pos_;
    if (pos_ >= t_.size()) error(at, "unexpected end of grammar");
    if (t_[pos_] == '\\') {
      ++pos_;
      if (pos_ >= t_.size()) error(at, "unterminated escape");
      const char e = t_[pos_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return hex(2, at);
        case 'u':
          return hex(4, at);
        case 'U':
          return hex(8, at);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '/':
        case '^':
          return static_cast<uint8_t>(e);
        default:
          error(at, std::string("unknown escape '\\") + e + "'");
      }
    }
    const std::optional<char32_t> cp = utf8::decode(t_, pos_);
    if (!cp) error(at, "invalid UTF-8");
    return *cp;
  }

  int32_t atom() {
    const size_t at = pos_;
    const char c = t_[pos_];
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (pos_ >= t_.size() || t_[pos_] == '\n') error(at, "unterminated string literal");
        if (t_[pos_] == '"') break;
        utf8::append(bytes, character());
      }
      ++pos_;
      return g_.literal(bytes);
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (pos_ < t_.size() && t_[pos_] == '^') {
        negate = true;
        ++pos_;
      }
      CodeRanges ranges;
      while (true) {
        if (pos_ >= t_.size() || t_[pos_] == '\n') error(at, "unterminated character class");
        if (t_[pos_] == ']') break;
        const uint32_t lo = character();
        uint32_t hi = lo;
        if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']' &&
            t_[pos_ + 1] != '\n') {
          ++pos_;
          hi = character();
          if (hi < lo) error(at, "character range out of order");
        }
        ranges.emplace_back(lo, hi);
      }
      ++pos_;
      ranges = normalize(std::move(ranges));
      return utf8_class(g_, negate ? complement(ranges) : ranges);
    }
    if (c == '.') {
      ++pos_;
      return utf8_class(g_, complement({}));
    }
    if (is_name_char(c)) {
      const std::string name = read_name();
      skip_space(false);
      if (t_.substr(pos_, 3) == "::=") error(at, "missing newline before rule '" + name + "'");
      return g_.ref(rule_id(name));
    }
    error(at, std::string("unexpected character '") + c + "'");
  }

  Grammar& g_;
  std::string_view t_;
  const GrammarLimits& limits_;
  size_t pos_ = 0;
};

}  // namespace

void parse_gbnf(Grammar& g, std::string_view text, const GrammarLimits& limits) {
  GbnfParser(g, text, limits).run();
}

}  // namespace rill::grammar
