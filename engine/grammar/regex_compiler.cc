#include "engine/grammar/regex_compiler.h"

#include <optional>
#include <string>
#include <vector>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/utf8_class.h"
#include "engine/util/utf8.h"

namespace rill::grammar {

namespace {

// One open group: the finished alternatives and the sequence being built.
struct Frame {
  std::vector<int32_t> alts;
  std::vector<int32_t> seq;
  bool last_quantified = false;  // the last item of `seq` already carries a quantifier
};

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, const RegexOptions& o) : g_(g), p_(p), o_(o) {}

  RegexResult run() {
    RegexResult r;
    if (starts_with("^")) {
      r.anchored_start = true;
      pos_ = 1;
    } else if (starts_with("\\A")) {
      r.anchored_start = true;
      pos_ = 2;
    }
    std::vector<Frame> stack(1);
    while (pos_ < p_.size()) {
      const size_t at = pos_;
      const char c = p_[pos_];
      if (c == '$' || (c == '\\' && pos_ + 1 < p_.size() && p_[pos_ + 1] == 'Z')) {
        pos_ += c == '$' ? 1 : 2;
        if (pos_ != p_.size() || stack.size() != 1)
          error(at, "anchors ($, \\Z) are supported only at the end of the pattern");
        r.anchored_end = true;
        break;
      }
      if (c == '|') {
        ++pos_;
        Frame& f = stack.back();
        f.alts.push_back(g_.seq(std::move(f.seq)));
        f.seq.clear();
        f.last_quantified = false;
        continue;
      }
      if (c == '(') {
        open_group();
        stack.emplace_back();
        continue;
      }
      if (c == ')') {
        if (stack.size() == 1) error(at, "unbalanced ')'");
        ++pos_;
        Frame f = std::move(stack.back());
        stack.pop_back();
        f.alts.push_back(g_.seq(std::move(f.seq)));
        push_atom(stack.back(), g_.choice(std::move(f.alts)));
        continue;
      }
      if (c == '*' || c == '+' || c == '?' || (c == '{' && is_bound())) {
        quantify(stack.back(), at);
        continue;
      }
      if (c == '^') error(at, "anchors (^, \\A) are supported only at the start of the pattern");
      push_atom(stack.back(), atom());
    }
    if (stack.size() != 1) error(p_.size(), "missing ')'");
    Frame& f = stack.back();
    f.alts.push_back(g_.seq(std::move(f.seq)));
    r.expr = g_.choice(std::move(f.alts));
    return r;
  }

 private:
  [[noreturn]] void error(size_t at, const std::string& what) const {
    fail(std::string(o_.what) + ": " + what + " at offset " + std::to_string(at));
  }
  bool starts_with(std::string_view s) const { return p_.substr(pos_, s.size()) == s; }

  void push_atom(Frame& f, int32_t e) {
    f.seq.push_back(e);
    f.last_quantified = false;
  }

  void open_group() {
    const size_t at = pos_++;
    if (!starts_with("?")) return;
    if (starts_with("?:")) {
      pos_ += 2;
    } else if (starts_with("?P<") || starts_with("?<")) {
      if (starts_with("?<=") || starts_with("?<!")) error(at, "lookbehind is not supported");
      const size_t end = p_.find('>', pos_);
      if (end == std::string_view::npos) error(at, "unterminated group name");
      pos_ = end + 1;
    } else if (starts_with("?=") || starts_with("?!")) {
      error(at, "lookahead is not supported");
    } else if (starts_with("?P=")) {
      error(at, "backreferences are not supported");
    } else {
      error(at, "inline flags and other (?...) extensions are not supported");
    }
  }

  bool is_bound() const {
    size_t i = pos_ + 1;
    while (i < p_.size() && (std::isdigit(static_cast<unsigned char>(p_[i])) || p_[i] == ',')) ++i;
    return i < p_.size() && p_[i] == '}' && i > pos_ + 1;
  }

  int32_t number(size_t at) {
    int64_t v = 0;
    size_t digits = 0;
    while (pos_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_]))) {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > o_.max_repeat)
        error(at, "repetition bound above the limit of " + std::to_string(o_.max_repeat));
      ++digits;
    }
    return digits == 0 ? -1 : static_cast<int32_t>(v);
  }

  void quantify(Frame& f, size_t at) {
    if (f.seq.empty()) error(at, "nothing to repeat");
    if (f.last_quantified) error(at, "multiple repeat");
    int32_t lo = 0, hi = -1;
    const char c = p_[pos_++];
    if (c == '+') lo = 1;
    if (c == '?') hi = 1;
    if (c == '{') {
      lo = number(at);
      hi = lo;
      if (p_[pos_] == ',') {
        ++pos_;
        hi = number(at);
      }
      if (lo < 0) lo = 0;
      ++pos_;  // '}'
      if (hi >= 0 && hi < lo) error(at, "min repeat greater than max repeat");
    }
    if (pos_ < p_.size() && p_[pos_] == '?')
      ++pos_;  // lazy: the same language
    else if (pos_ < p_.size() && p_[pos_] == '+')
      error(at, "possessive quantifiers are not supported");
    f.seq.back() = g_.repeat(f.seq.back(), lo, hi);
    f.last_quantified = true;
  }

  uint32_t next_char() {
    const std::optional<char32_t> cp = utf8::decode(p_, pos_);
    if (!cp) error(pos_, "invalid UTF-8");
    return *cp;
  }

  uint32_t hex(size_t digits, size_t at) {
    if (pos_ + digits > p_.size()) error(at, "truncated escape");
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = p_[pos_++];
      const int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                    : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                                : -1;
      if (d < 0) error(at, "bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > kMaxCodePoint) error(at, "code point out of range");
    return v;
  }

  // After a '\': the class it names (a single character is a one-element class).
  CodeRanges escape(bool in_class) {
    const size_t at = pos_ - 1;
    if (pos_ >= p_.size()) error(at, "trailing backslash");
    const char c = p_[pos_++];
    static const CodeRanges kDigit{{'0', '9'}}, kSpace{{'\t', '\r'}, {' ', ' '}},
        kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return complement(kDigit);
      case 's':
        return kSpace;
      case 'S':
        return complement(kSpace);
      case 'w':
        return kWord;
      case 'W':
        return complement(normalize(kWord));
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        const uint32_t v = hex(2, at);
        return {{v, v}};
      }
      case 'u': {
        const uint32_t v = hex(4, at);
        return {{v, v}};
      }
      case 'U': {
        const uint32_t v = hex(8, at);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        error(at, "word boundaries (\\b) are not supported");
      case 'B':
        error(at, "word boundaries (\\B) are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') error(at, "backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(c)))
      error(at, std::string("unknown escape \\") + c);
    --pos_;
    const uint32_t cp = next_char();
    return {{cp, cp}};
  }

  CodeRanges char_class() {
    const size_t at = pos_++;  // '['
    bool negate = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges ranges;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) error(at, "unterminated character class");
      if (p_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      CodeRanges item = class_item();
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < p_.size() &&
          p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CodeRanges hi = class_item();
        if (hi.size() != 1 || hi[0].first != hi[0].second) error(at, "bad character range");
        if (hi[0].first < item[0].first) error(at, "bad character range (reversed)");
        ranges.emplace_back(item[0].first, hi[0].first);
      } else {
        ranges.insert(ranges.end(), item.begin(), item.end());
      }
    }
    ranges = normalize(std::move(ranges));
    return negate ? complement(ranges) : ranges;
  }

  CodeRanges class_item() {
    if (p_[pos_] == '\\') {
      ++pos_;
      return escape(true);
    }
    if (starts_with("[:")) error(pos_, "POSIX character classes are not supported");
    const uint32_t cp = next_char();
    return {{cp, cp}};
  }

  int32_t encode(const CodeRanges& r) {
    return o_.json_string ? json_string_class(g_, r) : utf8_class(g_, r);
  }

  int32_t atom() {
    const char c = p_[pos_];
    if (c == '.') {
      ++pos_;
      return encode(complement({{'\n', '\n'}}));
    }
    if (c == '[') return encode(char_class());
    if (c == '\\') {
      ++pos_;
      return encode(normalize(escape(false)));
    }
    if (c == '{' || c == '}' || c == ']') {
      ++pos_;  // a literal, as Python reads one that is not a valid bound
      return encode({{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}});
    }
    const uint32_t cp = next_char();
    return encode({{cp, cp}});
  }

  Grammar& g_;
  std::string_view p_;
  const RegexOptions& o_;
  size_t pos_ = 0;
};

}  // namespace

RegexResult compile_regex(Grammar& g, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(g, pattern, options).run();
}

}  // namespace rill::grammar
