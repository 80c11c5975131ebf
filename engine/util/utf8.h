// UTF-8, the one decoder and encoder of the project (tokenizer, chat templates, grammars): code
// point decode/encode after the Unicode well-formed table (D92: no overlong forms, no surrogates,
// nothing above U+10FFFF), and Rust-compatible lossy conversion (Hugging Face decoders use
// String::from_utf8_lossy, so we must match it byte for byte, including how many U+FFFD an
// invalid sequence turns into).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rill::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

/// True for the code points UTF-8 can encode: [0, U+10FFFF] less the surrogates.
constexpr bool is_scalar_value(char32_t cp) {
  return cp <= kMaxCodePoint && (cp < 0xD800 || cp > 0xDFFF);
}

/// Length in bytes of the valid UTF-8 sequence starting at s[pos], or 0 if the bytes there do
/// not start a complete, well-formed sequence (overlong forms and surrogates are ill-formed).
size_t valid_sequence_length(std::string_view s, size_t pos);

/// Decodes the code point at s[pos] and advances pos past it; nullopt, pos unchanged, when the
/// bytes there are not one complete, well-formed sequence (a stray continuation byte, a
/// truncated sequence, an overlong form, a surrogate, a value above U+10FFFF). For untrusted
/// input: parsers report an error at pos.
std::optional<char32_t> decode(std::string_view s, size_t& pos);

/// Decodes the code point at s[pos] and advances pos. The input must be valid UTF-8 (callers
/// validate once at the API boundary); an ill-formed byte decodes as U+FFFD and advances by 1.
char32_t next(std::string_view s, size_t& pos);

/// Decodes without advancing.
inline char32_t peek(std::string_view s, size_t pos) {
  return next(s, pos);
}

/// Start of the code point that ends at `pos` (pos > 0) in valid UTF-8.
size_t prev_boundary(std::string_view s, size_t pos);

/// Appends the UTF-8 encoding of cp (surrogates and values > U+10FFFF become U+FFFD).
void append(std::string& out, char32_t cp);
std::string encode(char32_t cp);

bool is_valid(std::string_view s);

/// Exactly Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes one U+FFFD.
std::string from_lossy(std::string_view bytes);

/// Number of code points (valid UTF-8 input).
size_t count(std::string_view s);

std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);

}  // namespace rill::utf8
