#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/util/utf8.h"

namespace rill::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> byte_chars;
  std::array<int, 324> char_byte;  // mapped chars are all below U+0144

  Tables() {
    char_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes map to themselves; the rest to U+0100 + n in byte order.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      byte_chars[b] = utf8::encode(c);
      char_byte[c] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_chars(uint8_t b) {
  return tables().byte_chars[b];
}

int char_to_byte(char32_t c) {
  return c < tables().char_byte.size() ? tables().char_byte[c] : -1;
}

std::string encode_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += byte_to_chars(static_cast<uint8_t>(c));
  return out;
}

}  // namespace rill::byte_level
