// Internal backend interface behind rill::Tokenizer: one implementation per file format.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rill::detail {

class TokenizerImpl {
 public:
  virtual ~TokenizerImpl() = default;
  /// `text` is valid UTF-8 (the public API sanitizes it).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual bool is_byte_fallback_token(int32_t id) const = 0;
  /// Whether invalid UTF-8 input is passed through as bytes (llama2.c) or sanitized first.
  virtual bool accepts_raw_bytes() const { return false; }

  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
};

}  // namespace rill::detail
