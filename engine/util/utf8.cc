#include "engine/util/utf8.h"

namespace rill::utf8 {
namespace {

// Valid range of the second byte for a lead byte, per the Unicode well-formed table (D92):
// this is what excludes overlong forms, surrogates and code points above U+10FFFF.
struct LeadInfo {
  int length;  // 0: not a lead byte
  unsigned char second_lo;
  unsigned char second_hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the longest prefix at s[pos] that is a valid start of a sequence (the "maximal
// subpart"); equals info.length when the sequence is complete.
size_t valid_prefix(std::string_view s, size_t pos, const LeadInfo& info) {
  size_t n = 1;
  for (int i = 1; i < info.length; ++i) {
    if (pos + i >= s.size()) return n;
    auto c = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? info.second_lo : 0x80;
    const unsigned char hi = i == 1 ? info.second_hi : 0xBF;
    if (c < lo || c > hi) return n;
    ++n;
  }
  return n;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const LeadInfo info = lead_info(static_cast<unsigned char>(s[pos]));
  if (info.length == 0) return 0;
  const size_t n = valid_prefix(s, pos, info);
  return n == static_cast<size_t>(info.length) ? n : 0;
}

std::optional<char32_t> decode(std::string_view s, size_t& pos) {
  if (valid_sequence_length(s, pos) == 0) return std::nullopt;
  return next(s, pos);
}

char32_t next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t len = valid_sequence_length(s, pos);
  if (len == 0) {
    ++pos;
    return kReplacement;
  }
  char32_t cp = b0 & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  pos += len;
  return cp;
}

size_t prev_boundary(std::string_view s, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80 && pos - p < 4) --p;
  return p;
}

void append(std::string& out, char32_t cp) {
  if (!is_scalar_value(cp)) cp = kReplacement;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(char32_t cp) {
  std::string out;
  append(out, cp);
  return out;
}

bool is_valid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = valid_sequence_length(s, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string from_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++pos;
      continue;
    }
    const LeadInfo info = lead_info(b);
    if (info.length == 0) {
      append(out, kReplacement);
      ++pos;
      continue;
    }
    const size_t n = valid_prefix(bytes, pos, info);
    if (n == static_cast<size_t>(info.length)) {
      out.append(bytes.substr(pos, n));
    } else {
      append(out, kReplacement);  // one U+FFFD for the maximal ill-formed subpart
    }
    pos += n;
  }
  return out;
}

size_t count(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) next(s, pos);
  return n;
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) out.push_back(next(s, pos));
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append(out, cp);
  return out;
}

}  // namespace rill::utf8
