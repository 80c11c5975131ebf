// Python's html.unescape (for the striptags filter): every HTML5 named reference, legacy names
// without ';' matched as the longest prefix, and numeric references with the HTML5 fix-ups.
#include <algorithm>
#include <cstring>

#include "engine/chat/jinja_builtins.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

struct HtmlEntity {
  const char* name;
  const char* text;
};
struct HtmlCharref {
  char32_t cp;
  const char* text;
};

#include "engine/chat/html_entities.inc"

const char* find_entity(const std::string& name) {
  auto it = std::lower_bound(
      std::begin(kHtmlEntities), std::end(kHtmlEntities), name,
      [](const HtmlEntity& e, const std::string& n) { return std::strcmp(e.name, n.c_str()) < 0; });
  return it != std::end(kHtmlEntities) && name == it->name ? it->text : nullptr;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "&#...": the replacement for the digits at s[i..end) in `base`.
std::string numeric_reference(const std::string& s, size_t i, size_t end, int base) {
  while (i < end - 1 && s[i] == '0') ++i;  // leading zeros do not count towards the size
  char32_t cp = 0;
  if (end - i > 8) {
    cp = 0x110000;  // too large for any code point
  } else {
    for (size_t k = i; k < end; ++k) {
      const char c = s[k];
      cp = cp * static_cast<char32_t>(base) +
           static_cast<char32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
  }
  auto invalid = std::lower_bound(std::begin(kInvalidCharrefs), std::end(kInvalidCharrefs), cp,
                                  [](const HtmlCharref& r, char32_t v) { return r.cp < v; });
  if (invalid != std::end(kInvalidCharrefs) && invalid->cp == cp) return invalid->text;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return utf8::encode(0xFFFD);
  if (std::binary_search(std::begin(kInvalidCodepoints), std::end(kInvalidCodepoints), cp))
    return "";
  return utf8::encode(cp);
}

// At s[i] == '&': appends the replacement and returns the index after the reference, or
// returns i when nothing there is a reference.
size_t unescape_at(const std::string& s, size_t i, std::string& out) {
  size_t j = i + 1;
  if (j < s.size() && s[j] == '#') {
    const bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
    const size_t digits = j + (hex ? 2 : 1);
    size_t end = digits;
    while (end < s.size() && (hex ? is_hex(s[end]) : (s[end] >= '0' && s[end] <= '9'))) ++end;
    if (end == digits) return i;
    out += numeric_reference(s, digits, end, hex ? 16 : 10);
    return end < s.size() && s[end] == ';' ? end + 1 : end;
  }
  // Up to 32 characters other than \t \n \f space < & # ;, then an optional ';'.
  size_t end = j;
  for (int chars = 0; end < s.size() && chars < 32; ++chars) {
    const char c = s[end];
    if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' ||
        c == ';')
      break;
    end += std::max<size_t>(1, utf8::valid_sequence_length(s, end));
  }
  if (end == j) return i;
  if (end < s.size() && s[end] == ';') ++end;
  const std::string name = s.substr(j, end - j);
  if (const char* text = find_entity(name)) {
    out += text;
    return end;
  }
  for (size_t len = name.size() - 1; len >= 2; --len) {  // the longest known prefix
    if (const char* text = find_entity(name.substr(0, len))) {
      out += text;
      return j + len;
    }
  }
  return i;
}

}  // namespace

std::string html_unescape(const std::string& s) {
  if (s.find('&') == std::string::npos) return s;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '&') {
      const size_t next = unescape_at(s, i, out);
      if (next != i) {
        i = next;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

}  // namespace rill::jinja
