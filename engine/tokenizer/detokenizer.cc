// IncrementalDetokenizer (declared in tokenizer.h): see the class comment for the scheme.
#include <algorithm>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace rill {
namespace {

// Tokens of context kept as the first anchor: enough for any decoder's first-token rules.
constexpr size_t kAnchorTokens = 6;
// How far back the first anchor may reach to begin on a visible, non-byte token.
constexpr size_t kMaxAnchorTokens = 64;

bool ends_with_replacement(const std::string& s) {
  static const std::string kFffd = utf8::encode(utf8::kReplacement);
  return s.size() >= kFffd.size() && s.compare(s.size() - kFffd.size(), kFffd.size(), kFffd) == 0;
}

// Length of the longest common prefix of a and b that ends on a code point boundary of b.
size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < b.size() && (static_cast<unsigned char>(b[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens,
                                               std::span<const int32_t> context)
    : tok_(tok),
      skip_special_(skip_special_tokens),
      ids_(context.begin(), context.end()),
      context_size_(context.size()) {
  read_offset_ = ids_.size();
  if (ids_.empty()) return;
  context_text_ = tok_.decode(ids_, skip_special_);
  // The anchor starts a few tokens back, on a token that is visible and does not continue a
  // byte-fallback run, so that its text decodes the same alone as inside the full sequence.
  size_t start = ids_.size() > kAnchorTokens ? ids_.size() - kAnchorTokens : 0;
  const size_t limit = ids_.size() > kMaxAnchorTokens ? ids_.size() - kMaxAnchorTokens : 0;
  auto has_visible = [&](size_t from) {
    return std::any_of(ids_.begin() + static_cast<std::ptrdiff_t>(from), ids_.end(),
                       [&](int32_t id) { return visible(id); });
  };
  while (start > limit && (!has_visible(start) || tok_.is_byte_fallback_token(ids_[start]) ||
                           tok_.is_byte_fallback_token(ids_[start - 1]))) {
    --start;
  }
  prefix_offset_ = start;
}

bool IncrementalDetokenizer::visible(int32_t id) const {
  return id >= 0 && id < tok_.vocab_size() && !(skip_special_ && tok_.is_special(id));
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  if (!in_sync_) return {};
  // A run of byte-fallback tokens decodes as a whole (valid UTF-8 or one U+FFFD per byte):
  // wait until a visible token ends it.
  for (size_t i = ids_.size(); i > read_offset_; --i) {
    if (!visible(ids_[i - 1])) continue;
    if (tok_.is_byte_fallback_token(ids_[i - 1])) return {};
    break;
  }
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tok_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tok_.decode(all.subspan(prefix_offset_), skip_special_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text) ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    return {};  // nothing new yet, an incomplete character, or (rarely) text to settle in flush
  }
  std::string delta = new_text.substr(prefix_text.size());
  emitted_ += delta;
  // The emitted tokens become the next anchor, if one of them is visible (an anchor of only
  // skipped tokens would decode to nothing and lose the decoder's first-token context).
  const bool anchor_visible = std::any_of(ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_),
                                          ids_.end(), [&](int32_t t) { return visible(t); });
  if (anchor_visible) prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  // One full decode settles whatever was held back, exactly.
  const std::string full = tok_.decode(ids_, skip_special_);
  const std::string expected = full.substr(common_prefix(context_text_, full));
  read_offset_ = ids_.size();
  if (!in_sync_ || expected.compare(0, emitted_.size(), emitted_) != 0) {
    in_sync_ = false;  // cannot happen with the supported decoders; never emit twice
    return {};
  }
  std::string rest = expected.substr(emitted_.size());
  emitted_ = expected;
  return rest;
}

}  // namespace rill
