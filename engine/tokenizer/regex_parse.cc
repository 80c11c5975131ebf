// Parser for rill::Regex: recursive descent over the pattern's code points into the node tree
// that regex.cc matches. See regex.h for the supported syntax.
#include <algorithm>
#include <cctype>
#include <string>

#include "engine/error.h"
#include "engine/tokenizer/regex.h"
#include "engine/util/utf8.h"

namespace rill {

using Node = Regex::Node;
using Op = Regex::Node::Op;
using ClassItem = Regex::ClassItem;

namespace {

struct PropertyName {
  const char* name;
  unicode::CategoryMask mask;
};

unicode::CategoryMask category_bits(std::initializer_list<unicode::Category> cats) {
  unicode::CategoryMask m = 0;
  for (auto c : cats) m |= unicode::bit(c);
  return m;
}

// Names are compared after lowercasing and dropping '_', '-' and ' ' (Oniguruma's loose match).
bool lookup_property(const std::string& raw, unicode::CategoryMask* mask) {
  using C = unicode::Category;
  static const PropertyName kNames[] = {
      {"l", unicode::kLetter},
      {"letter", unicode::kLetter},
      {"lu", category_bits({C::kLu})},
      {"uppercaseletter", category_bits({C::kLu})},
      {"ll", category_bits({C::kLl})},
      {"lowercaseletter", category_bits({C::kLl})},
      {"lt", category_bits({C::kLt})},
      {"titlecaseletter", category_bits({C::kLt})},
      {"lm", category_bits({C::kLm})},
      {"modifierletter", category_bits({C::kLm})},
      {"lo", category_bits({C::kLo})},
      {"otherletter", category_bits({C::kLo})},
      {"m", unicode::kMark},
      {"mark", unicode::kMark},
      {"combiningmark", unicode::kMark},
      {"mn", category_bits({C::kMn})},
      {"nonspacingmark", category_bits({C::kMn})},
      {"mc", category_bits({C::kMc})},
      {"spacingmark", category_bits({C::kMc})},
      {"me", category_bits({C::kMe})},
      {"enclosingmark", category_bits({C::kMe})},
      {"n", unicode::kNumber},
      {"number", unicode::kNumber},
      {"nd", category_bits({C::kNd})},
      {"decimalnumber", category_bits({C::kNd})},
      {"nl", category_bits({C::kNl})},
      {"letternumber", category_bits({C::kNl})},
      {"no", category_bits({C::kNo})},
      {"othernumber", category_bits({C::kNo})},
      {"p", unicode::kPunctuation},
      {"punctuation", unicode::kPunctuation},
      {"pc", category_bits({C::kPc})},
      {"connectorpunctuation", category_bits({C::kPc})},
      {"pd", category_bits({C::kPd})},
      {"dashpunctuation", category_bits({C::kPd})},
      {"ps", category_bits({C::kPs})},
      {"openpunctuation", category_bits({C::kPs})},
      {"pe", category_bits({C::kPe})},
      {"closepunctuation", category_bits({C::kPe})},
      {"pi", category_bits({C::kPi})},
      {"initialpunctuation", category_bits({C::kPi})},
      {"pf", category_bits({C::kPf})},
      {"finalpunctuation", category_bits({C::kPf})},
      {"po", category_bits({C::kPo})},
      {"otherpunctuation", category_bits({C::kPo})},
      {"s", unicode::kSymbol},
      {"symbol", unicode::kSymbol},
      {"sm", category_bits({C::kSm})},
      {"mathsymbol", category_bits({C::kSm})},
      {"sc", category_bits({C::kSc})},
      {"currencysymbol", category_bits({C::kSc})},
      {"sk", category_bits({C::kSk})},
      {"modifiersymbol", category_bits({C::kSk})},
      {"so", category_bits({C::kSo})},
      {"othersymbol", category_bits({C::kSo})},
      {"z", unicode::kSeparator},
      {"separator", unicode::kSeparator},
      {"zs", category_bits({C::kZs})},
      {"spaceseparator", category_bits({C::kZs})},
      {"zl", category_bits({C::kZl})},
      {"lineseparator", category_bits({C::kZl})},
      {"zp", category_bits({C::kZp})},
      {"paragraphseparator", category_bits({C::kZp})},
      {"c", unicode::kOther},
      {"other", unicode::kOther},
      {"cc", category_bits({C::kCc})},
      {"control", category_bits({C::kCc})},
      {"cf", category_bits({C::kCf})},
      {"format", category_bits({C::kCf})},
      {"cs", category_bits({C::kCs})},
      {"surrogate", category_bits({C::kCs})},
      {"co", category_bits({C::kCo})},
      {"privateuse", category_bits({C::kCo})},
      {"cn", category_bits({C::kCn})},
      {"unassigned", category_bits({C::kCn})},
      {"whitespace", unicode::kWhiteSpaceBit},
      {"space", unicode::kWhiteSpaceBit},
  };
  std::string key;
  for (char c : raw) {
    if (c == '_' || c == '-' || c == ' ') continue;
    key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  for (const auto& p : kNames) {
    if (key == p.name) {
      *mask = p.mask;
      return true;
    }
  }
  return false;
}

}  // namespace

class RegexParser {
 public:
  explicit RegexParser(Regex& re) : re_(re), p_(utf8::to_u32(re.pattern_)) {}

  void parse() {
    bool icase = false;
    re_.root_ = parse_alt(icase);
    if (i_ < p_.size()) fail(ErrorCode::kInvalidArgument, "unbalanced ')'");
  }

 private:
  // A class atom is either one code point or a property (\s, \p{L}, ...).
  struct ClassAtom {
    bool is_char;
    char32_t ch;
    ClassItem item;
  };

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const {
    throw Error(code, "regex: " + what + " at offset " + std::to_string(i_) + " in pattern '" +
                          re_.pattern_ + "'");
  }
  bool at_end() const { return i_ >= p_.size(); }
  char32_t peek(size_t ahead = 0) const { return i_ + ahead < p_.size() ? p_[i_ + ahead] : 0; }
  char32_t get() {
    if (at_end()) fail(ErrorCode::kInvalidArgument, "unexpected end of pattern");
    return p_[i_++];
  }
  bool eat(char32_t c) {
    if (peek() != c || at_end()) return false;
    ++i_;
    return true;
  }
  int add(Node n) {
    re_.nodes_.push_back(std::move(n));
    return static_cast<int>(re_.nodes_.size()) - 1;
  }
  int add_op(Op op) {
    Node n;
    n.op = op;
    return add(std::move(n));
  }

  int parse_alt(bool& icase) {
    std::vector<int> alts{parse_seq(icase)};
    while (eat('|')) alts.push_back(parse_seq(icase));
    if (alts.size() == 1) return alts[0];
    Node n;
    n.op = Op::kAlt;
    n.children = std::move(alts);
    return add(std::move(n));
  }

  int parse_seq(bool& icase) {
    Node seq;
    seq.op = Op::kSeq;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '(' && peek(1) == '?' && try_inline_flags(icase)) continue;
      int atom = parse_atom(icase);
      seq.children.push_back(parse_quantifier(atom));
    }
    if (seq.children.size() == 1) return seq.children[0];
    return add(std::move(seq));
  }

  // "(?i)" / "(?-i)": sets the flag for the rest of the enclosing group.
  bool try_inline_flags(bool& icase) {
    size_t j = i_ + 2;
    bool on = true;
    bool value = icase;
    for (; j < p_.size() && p_[j] != ')' && p_[j] != ':'; ++j) {
      if (p_[j] == '-') {
        on = false;
      } else if (p_[j] == 'i') {
        value = on;
      } else {
        return false;  // not a flag group; parse_atom reports it
      }
    }
    if (j >= p_.size() || p_[j] != ')' || j == i_ + 2) return false;
    icase = value;
    i_ = j + 1;
    return true;
  }

  int parse_group(bool icase) {
    Op wrap = Op::kSeq;  // kSeq: plain (non-)capturing group
    if (eat('?')) {
      const char32_t c = get();
      if (c == ':') {
      } else if (c == '=') {
        wrap = Op::kLookahead;
      } else if (c == '!') {
        wrap = Op::kNegLookahead;
      } else if (c == 'i' || c == '-') {
        bool on = c == 'i';
        icase = on;
        while (peek() == 'i' || peek() == '-') {
          if (get() == '-')
            on = false;
          else
            icase = on;
        }
        if (!eat(':')) fail(ErrorCode::kUnsupported, "unsupported group flags");
      } else {
        fail(ErrorCode::kUnsupported,
             std::string("unsupported group construct '(?") + utf8::encode(c) + "'");
      }
    }
    int inner = parse_alt(icase);
    if (!eat(')')) fail(ErrorCode::kInvalidArgument, "missing ')'");
    if (wrap == Op::kSeq) return inner;
    Node n;
    n.op = wrap;
    n.children = {inner};
    return add(std::move(n));
  }

  int parse_atom(bool icase) {
    const char32_t c = get();
    switch (c) {
      case '(':
        return parse_group(icase);
      case '[':
        return parse_class(icase);
      case '.':
        return add_op(Op::kAny);
      case '^':
        return add_op(Op::kLineStart);
      case '$':
        return add_op(Op::kLineEnd);
      case '*':
      case '+':
      case '?':
        fail(ErrorCode::kInvalidArgument, "quantifier without operand");
      case '\\':
        return parse_escape_atom(icase);
      default:
        return literal(c, icase);
    }
  }

  int literal(char32_t c, bool icase) {
    Node n;
    n.op = Op::kLiteral;
    n.ch = c;
    n.icase = icase;
    return add(std::move(n));
  }

  int parse_escape_atom(bool icase) {
    const char32_t c = peek();
    if (c == 'A') {
      ++i_;
      return add_op(Op::kTextStart);
    }
    if (c == 'z') {
      ++i_;
      return add_op(Op::kTextEnd);
    }
    ClassAtom a = parse_escape();
    if (a.is_char) return literal(a.ch, icase);
    Regex::CharClass cls;
    cls.items.push_back(a.item);
    return add_class(std::move(cls), icase);
  }

  int add_class(Regex::CharClass cls, bool icase) {
    re_.classes_.push_back(std::move(cls));
    Node n;
    n.op = Op::kClass;
    n.cls = static_cast<int>(re_.classes_.size()) - 1;
    n.icase = icase;
    return add(std::move(n));
  }

  static ClassAtom property(unicode::CategoryMask mask, bool negated) {
    ClassItem item;
    item.kind = negated ? ClassItem::Kind::kNotProperty : ClassItem::Kind::kProperty;
    item.mask = mask;
    return {false, 0, item};
  }

  uint32_t parse_hex(size_t min_digits, size_t max_digits) {
    uint32_t v = 0;
    size_t n = 0;
    while (n < max_digits && std::isxdigit(static_cast<int>(peek() < 128 ? peek() : 0))) {
      const char32_t d = get();
      v = v * 16 + (d <= '9' ? d - '0' : (d | 0x20) - 'a' + 10);
      ++n;
    }
    if (n < min_digits) fail(ErrorCode::kInvalidArgument, "bad hex escape");
    return v;
  }

  // After a backslash (inside or outside a class).
  ClassAtom parse_escape() {
    const char32_t c = get();
    switch (c) {
      case 't':
        return {true, '\t', {}};
      case 'n':
        return {true, '\n', {}};
      case 'r':
        return {true, '\r', {}};
      case 'f':
        return {true, '\f', {}};
      case 'v':
        return {true, '\v', {}};
      case 'e':
        return {true, 0x1B, {}};
      case 'a':
        return {true, 0x07, {}};
      case '0':
        return {true, 0, {}};
      case 's':
        return property(unicode::kWhiteSpaceBit, false);
      case 'S':
        return property(unicode::kWhiteSpaceBit, true);
      case 'd':
        return property(unicode::bit(unicode::Category::kNd), false);
      case 'D':
        return property(unicode::bit(unicode::Category::kNd), true);
      case 'w':
        return property(unicode::kWord, false);
      case 'W':
        return property(unicode::kWord, true);
      case 'p':
      case 'P':
        return parse_property(c == 'P');
      case 'x':
        if (eat('{')) {
          const uint32_t v = parse_hex(1, 8);
          if (!eat('}')) fail(ErrorCode::kInvalidArgument, "missing '}' in \\x{...}");
          return {true, v, {}};
        }
        return {true, parse_hex(1, 2), {}};
      case 'u':
        return {true, parse_hex(4, 4), {}};
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
          fail(ErrorCode::kUnsupported,
               std::string("unsupported escape '\\") + static_cast<char>(c) + "'");
        }
        return {true, c, {}};  // escaped punctuation or any other literal
    }
  }

  ClassAtom parse_property(bool negated) {
    std::string name;
    if (eat('{')) {
      if (eat('^')) negated = !negated;
      while (!at_end() && peek() != '}') utf8::append(name, get());
      if (!eat('}')) fail(ErrorCode::kInvalidArgument, "missing '}' in \\p{...}");
    } else {
      utf8::append(name, get());
    }
    unicode::CategoryMask mask = 0;
    if (!lookup_property(name, &mask)) {
      fail(ErrorCode::kUnsupported, "unsupported property '\\p{" + name + "}'");
    }
    return property(mask, negated);
  }

  ClassAtom parse_class_atom() {
    const char32_t c = get();
    if (c == '\\') return parse_escape();
    if (c == '[') {
      fail(ErrorCode::kUnsupported,
           peek() == ':' ? "unsupported POSIX bracket" : "unsupported nested character class");
    }
    if (c == '&' && peek() == '&') fail(ErrorCode::kUnsupported, "unsupported class intersection");
    return {true, c, {}};
  }

  int parse_class(bool icase) {
    Regex::CharClass cls;
    cls.negated = eat('^');
    bool first = true;
    while (true) {
      if (at_end()) fail(ErrorCode::kInvalidArgument, "missing ']'");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      ClassAtom a = parse_class_atom();
      if (!a.is_char) {
        cls.items.push_back(a.item);
        continue;
      }
      ClassItem range{ClassItem::Kind::kRange, a.ch, a.ch, 0};
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        ClassAtom hi = parse_class_atom();
        if (!hi.is_char || hi.ch < a.ch) fail(ErrorCode::kInvalidArgument, "bad class range");
        range.hi = hi.ch;
      }
      cls.items.push_back(range);
    }
    return add_class(std::move(cls), icase);
  }

  bool parse_count(int* value) {
    if (!(peek() >= '0' && peek() <= '9')) return false;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<long>(get() - '0');
      if (v > 100000) fail(ErrorCode::kUnsupported, "repeat count too large");
    }
    *value = static_cast<int>(v);
    return true;
  }

  // "{m}", "{m,}", "{m,n}" and Oniguruma's "{,n}"; anything else leaves '{' to be read as a
  // literal.
  bool parse_braces(int* min, int* max) {
    const size_t save = i_;
    ++i_;  // '{'
    const bool has_min = parse_count(min);
    if (!has_min) *min = 0;
    *max = *min;
    bool has_max = false;
    if (eat(',')) {
      has_max = parse_count(max);
      if (!has_max) *max = -1;
    }
    const bool ok = (has_min || has_max) && eat('}') && (*max == -1 || *max >= *min);
    if (!ok) i_ = save;
    return ok;
  }

  int parse_quantifier(int atom) {
    while (!at_end()) {
      int min = 0;
      int max = -1;
      const char32_t c = peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        ++i_;
        min = 1;
      } else if (c == '?') {
        ++i_;
        max = 1;
      } else if (c == '{' && parse_braces(&min, &max)) {
      } else {
        break;
      }
      const Op op = re_.nodes_[atom].op;
      if (op == Op::kLookahead || op == Op::kNegLookahead || op == Op::kLineStart ||
          op == Op::kLineEnd || op == Op::kTextStart || op == Op::kTextEnd) {
        fail(ErrorCode::kUnsupported, "quantified assertion");
      }
      Node n;
      n.op = Op::kRepeat;
      n.min = min;
      n.max = max;
      n.children = {atom};
      if (eat('?')) n.greedy = false;
      if (peek() == '+') fail(ErrorCode::kUnsupported, "unsupported possessive quantifier");
      atom = add(std::move(n));
    }
    return atom;
  }

  Regex& re_;
  std::u32string p_;
  size_t i_ = 0;
};

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  if (!utf8::is_valid(pattern)) {
    throw Error(ErrorCode::kInvalidArgument, "regex: pattern is not valid UTF-8");
  }
  RegexParser(*this).parse();
}

}  // namespace rill
