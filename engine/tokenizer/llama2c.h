// llama2.c tokenizer.bin: encode and decode exactly like run.c's encode() / decode().
// File format: int32 max_token_length, then per token: float32 score, int32 len, len bytes.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace rill {

class Llama2cTokenizer : public detail::TokenizerImpl {
 public:
  /// Parses the bytes of a tokenizer.bin; `source` names it in errors.
  static std::shared_ptr<Llama2cTokenizer> parse(std::string_view bytes, int32_t vocab_size,
                                                 const std::string& source);
  static std::shared_ptr<Llama2cTokenizer> load(const std::filesystem::path& path,
                                                int32_t vocab_size);

  Llama2cTokenizer(std::vector<std::string> vocab, std::vector<float> scores);

  /// BOS (1) when add_special_tokens, a dummy-prefix " " for non-empty text, one token per
  /// UTF-8 code point (or byte tokens id = byte + 3), then repeatedly the adjacent pair whose
  /// concatenation has the highest score (leftmost on ties) is merged. EOS is never added.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  /// Pieces concatenated (the leading space of a piece after BOS dropped, "<0xXX>" as raw
  /// bytes), then converted like String::from_utf8_lossy. skip_special_tokens drops ids 0-2.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override { return id >= 0 && id <= 2 && id < vocab_size(); }
  bool is_byte_fallback_token(int32_t) const override { return false; }
  bool accepts_raw_bytes() const override { return true; }

 private:
  std::vector<int32_t> initial_tokens(std::string_view text, bool add_bos) const;
  void merge_pairs(std::vector<int32_t>& tokens) const;

  std::vector<std::string> vocab_;
  std::vector<float> scores_;
  TokenMap lookup_;  // piece -> lowest id with that piece
};

}  // namespace rill
