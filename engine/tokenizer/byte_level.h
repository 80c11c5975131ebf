// GPT-2's reversible byte <-> printable-character mapping (bytes_to_unicode), shared by the
// ByteLevel pre-tokenizer (bytes -> chars) and the ByteLevel decoder (chars -> bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rill::byte_level {

/// UTF-8 of the character that stands for byte b.
const std::string& byte_to_chars(uint8_t b);

/// The byte that character c stands for, or -1 when c is not one of the 256 mapped chars.
int char_to_byte(char32_t c);

/// Replaces every byte of s by its character.
std::string encode_bytes(std::string_view s);

}  // namespace rill::byte_level
