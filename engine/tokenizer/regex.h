// A small backtracking regex engine for the pre-tokenizer patterns found in tokenizer.json
// files (GPT-2, Llama-3, Qwen2, GPT-4o-style, DeepSeek). It matches like Oniguruma, which
// Hugging Face tokenizers uses: leftmost-first alternation, greedy quantifiers by default.
//
// Supported: literals and escapes (\t \n \r \f \v \e \0 \xHH \x{H..} \uHHHH, escaped
// punctuation), \s \S \d \D \w \W, \p{..} / \P{..} / \pL with general categories (L Lu Ll Lt
// Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Cs Co Cn
// and their long names), character classes with ranges and negation, `.`, groups `( )`,
// `(?: )`, `(?i: )` / `(?i)` (ASCII case folding plus ſ and the Kelvin sign), lookahead
// `(?= )` / `(?! )`, alternation, `^ $ \A \z`, quantifiers `? * + {m} {m,} {m,n}` and their
// lazy forms. Anything else (lookbehind, backreferences, \b, scripts, possessive quantifiers)
// is rejected with a rill::Error that names the pattern.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tokenizer/unicode.h"

namespace rill {

class Regex {
 public:
  /// Compiles `pattern`; throws rill::Error(kUnsupported / kInvalidArgument) naming it.
  explicit Regex(std::string_view pattern);

  /// Leftmost match starting at or after byte offset `from` (a code point boundary) in valid
  /// UTF-8 `text`. Returns false when there is none.
  bool search(std::string_view text, size_t from, size_t* begin, size_t* end) const;

  /// All non-overlapping matches, left to right, as [begin, end) byte ranges; after an empty
  /// match the search resumes one code point later (Oniguruma's find_iter).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

  // The compiled program: a tree of nodes, children by index into nodes_.
  struct ClassItem {
    enum class Kind : uint8_t { kRange, kProperty, kNotProperty };
    Kind kind;
    char32_t lo = 0;
    char32_t hi = 0;
    unicode::CategoryMask mask = 0;
  };
  struct Node {
    enum class Op : uint8_t {
      kLiteral,       // one code point `ch`
      kClass,         // one code point in classes_[cls]
      kAny,           // any code point but \n
      kSeq,           // children in order
      kAlt,           // first child that leads to an overall match
      kRepeat,        // children[0] repeated [min, max] times
      kLookahead,     // children[0] must match here (consumes nothing)
      kNegLookahead,  // children[0] must not match here
      kLineStart,     // ^
      kLineEnd,       // $
      kTextStart,     // \A
      kTextEnd,       // \z
    };
    Op op;
    bool icase = false;
    bool greedy = true;
    char32_t ch = 0;
    int cls = -1;
    int min = 0;
    int max = 0;  // -1: unbounded
    std::vector<int> children;
  };
  struct CharClass {
    bool negated = false;
    std::vector<ClassItem> items;
  };

 private:
  friend class RegexParser;
  friend class RegexMatcher;

  std::string pattern_;
  std::vector<Node> nodes_;
  std::vector<CharClass> classes_;
  int root_ = -1;
};

}  // namespace rill
