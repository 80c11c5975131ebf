// Backtracking matcher for rill::Regex. Each node is matched with an explicit continuation
// ("what must match after me"), which gives Perl/Oniguruma leftmost-first semantics directly:
// alternatives and repeat counts are tried in priority order and the first path whose
// continuation succeeds wins. Repeats of a single-code-point node (\p{L}+, \s*, [^...]?) are
// matched iteratively, so the usual tokenizer patterns never recurse per character.
#include <string>

#include "engine/error.h"
#include "engine/tokenizer/regex.h"
#include "engine/util/utf8.h"

namespace rill {

using Node = Regex::Node;
using Op = Regex::Node::Op;
using ClassItem = Regex::ClassItem;

namespace {

// A non-owning reference to a `bool(size_t)` callable that lives on the caller's stack.
class Cont {
 public:
  template <typename F>
  explicit Cont(F& f)
      : obj_(&f), call_([](void* o, size_t p) { return (*static_cast<F*>(o))(p); }) {}
  bool operator()(size_t p) const { return call_(obj_, p); }

 private:
  void* obj_;
  bool (*call_)(void*, size_t);
};

// Recursion bound: deep enough for any tokenizer pattern, far below the thread stack.
constexpr int kMaxDepth = 4000;

char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
  if (c == 0x017F) return 's';  // LATIN SMALL LETTER LONG S folds to s
  if (c == 0x212A) return 'k';  // KELVIN SIGN folds to k
  return c;
}

bool item_matches(const ClassItem& item, char32_t cp) {
  switch (item.kind) {
    case ClassItem::Kind::kRange:
      return cp >= item.lo && cp <= item.hi;
    case ClassItem::Kind::kProperty:
      return unicode::has_property(cp, item.mask);
    case ClassItem::Kind::kNotProperty:
      return !unicode::has_property(cp, item.mask);
  }
  return false;
}

bool items_match(const Regex::CharClass& cls, char32_t cp) {
  for (const auto& item : cls.items) {
    if (item_matches(item, cp)) return true;
  }
  return false;
}

// Code points that are case-insensitively equal to cp (besides cp itself).
int case_variants(char32_t cp, char32_t out[3]) {
  const char32_t f = fold(cp);
  if (f < 'a' || f > 'z') return 0;
  const char32_t candidates[4] = {f, static_cast<char32_t>(f - 'a' + 'A'),
                                  f == 's' ? char32_t{0x017F} : char32_t{0},
                                  f == 'k' ? char32_t{0x212A} : char32_t{0}};
  int n = 0;
  for (char32_t v : candidates) {
    if (v != 0 && v != cp && n < 3) out[n++] = v;
  }
  return n;
}

}  // namespace

class RegexMatcher {
 public:
  RegexMatcher(const Regex& re, std::string_view text) : re_(re), text_(text) {}

  bool match_at(size_t pos, size_t* end) {
    auto accept = [end](size_t p) {
      *end = p;
      return true;
    };
    return match(re_.root_, pos, Cont(accept));
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(RegexMatcher& m) : m_(m) {
      if (++m_.depth_ > kMaxDepth) {
        --m_.depth_;
        throw Error(ErrorCode::kUnsupported,
                    "regex: pattern '" + m_.re_.pattern_ + "' recursed too deeply on this input");
      }
    }
    ~DepthGuard() { --m_.depth_; }
    RegexMatcher& m_;
  };

  bool class_matches(const Regex::CharClass& cls, char32_t cp, bool icase) const {
    bool in = items_match(cls, cp);
    if (!in && icase) {
      char32_t variants[3];
      const int n = case_variants(cp, variants);
      for (int i = 0; i < n && !in; ++i) in = items_match(cls, variants[i]);
    }
    return in != cls.negated;
  }

  static bool is_single(const Node& n) {
    return n.op == Op::kLiteral || n.op == Op::kClass || n.op == Op::kAny;
  }

  // Matches a single-code-point node at pos; sets *next past it.
  bool one(const Node& n, size_t pos, size_t* next) const {
    if (pos >= text_.size()) return false;
    size_t p = pos;
    const char32_t cp = utf8::next(text_, p);
    bool ok = false;
    switch (n.op) {
      case Op::kLiteral:
        ok = n.icase ? fold(cp) == fold(n.ch) : cp == n.ch;
        break;
      case Op::kClass:
        ok = class_matches(re_.classes_[n.cls], cp, n.icase);
        break;
      case Op::kAny:
        ok = cp != '\n';
        break;
      default:
        break;
    }
    if (ok) *next = p;
    return ok;
  }

  bool match(int index, size_t pos, Cont k) {
    DepthGuard guard(*this);
    const Node& n = re_.nodes_[index];
    switch (n.op) {
      case Op::kLiteral:
      case Op::kClass:
      case Op::kAny: {
        size_t next = 0;
        return one(n, pos, &next) && k(next);
      }
      case Op::kSeq:
        return seq(n, 0, pos, k);
      case Op::kAlt:
        for (int child : n.children) {
          if (match(child, pos, k)) return true;
        }
        return false;
      case Op::kRepeat:
        if (is_single(re_.nodes_[n.children[0]])) return repeat_single(n, pos, k);
        return repeat(n, 0, pos, k);
      case Op::kLookahead:
      case Op::kNegLookahead: {
        auto accept = [](size_t) { return true; };
        const bool found = match(n.children[0], pos, Cont(accept));
        return found == (n.op == Op::kLookahead) && k(pos);
      }
      case Op::kLineStart:
        return (pos == 0 || text_[pos - 1] == '\n') && k(pos);
      case Op::kLineEnd:
        return (pos == text_.size() || text_[pos] == '\n') && k(pos);
      case Op::kTextStart:
        return pos == 0 && k(pos);
      case Op::kTextEnd:
        return pos == text_.size() && k(pos);
    }
    return false;
  }

  bool seq(const Node& n, size_t i, size_t pos, Cont k) {
    if (i == n.children.size()) return k(pos);
    auto rest = [&](size_t p) { return seq(n, i + 1, p, k); };
    return match(n.children[i], pos, Cont(rest));
  }

  // General repeat: one more iteration first (greedy) or last (lazy). An iteration that
  // consumes nothing once `min` is reached ends the loop, as in Oniguruma.
  bool repeat(const Node& n, int count, size_t pos, Cont k) {
    const bool can_more = n.max < 0 || count < n.max;
    auto more = [&](size_t p) {
      if (p == pos && count >= n.min) return false;
      return repeat(n, count + 1, p, k);
    };
    if (!n.greedy && count >= n.min && k(pos)) return true;
    if (can_more && match(n.children[0], pos, Cont(more))) return true;
    return n.greedy && count >= n.min && k(pos);
  }

  bool repeat_single(const Node& n, size_t pos, Cont k) {
    const Node& child = re_.nodes_[n.children[0]];
    size_t p = pos;
    size_t next = 0;
    long count = 0;
    if (n.greedy) {
      while ((n.max < 0 || count < n.max) && one(child, p, &next)) {
        p = next;
        ++count;
      }
      if (count < n.min) return false;
      while (true) {
        if (k(p)) return true;
        if (count == n.min) return false;
        p = utf8::prev_boundary(text_, p);
        --count;
      }
    }
    for (; count < n.min; ++count) {
      if (!one(child, p, &next)) return false;
      p = next;
    }
    while (true) {
      if (k(p)) return true;
      if ((n.max >= 0 && count >= n.max) || !one(child, p, &next)) return false;
      p = next;
      ++count;
    }
  }

  const Regex& re_;
  std::string_view text_;
  int depth_ = 0;
};

bool Regex::search(std::string_view text, size_t from, size_t* begin, size_t* end) const {
  RegexMatcher m(*this, text);
  for (size_t start = from; start <= text.size();) {
    if (m.match_at(start, end)) {
      *begin = start;
      return true;
    }
    if (start == text.size()) break;
    utf8::next(text, start);
  }
  return false;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    size_t b = 0;
    size_t e = 0;
    if (!search(text, pos, &b, &e)) break;
    if (b == e && have_last && e == last_end) {
      // No empty match right where the previous match ended: step one code point on.
      if (pos >= text.size()) break;
      utf8::next(text, pos);
      continue;
    }
    out.emplace_back(b, e);
    have_last = true;
    last_end = e;
    pos = e;
  }
  return out;
}

}  // namespace rill
