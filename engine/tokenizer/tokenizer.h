// Rill's tokenizer: Hugging Face tokenizer.json (BPE pipelines: GPT-2 / Llama-3 / Qwen2 /
// GPT-NeoX byte-level, Llama-2 / Mistral SentencePiece-style) and llama2.c tokenizer.bin,
// matching the reference implementations id for id. Thread-safe: a Tokenizer is immutable
// (its BPE word cache is internally locked) and cheap to copy (shared state).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rill {

namespace detail {
class TokenizerImpl;
}

class Tokenizer {
 public:
  /// Loads tokenizer.json (+ tokenizer_config.json and special_tokens_map.json when present)
  /// from a Hugging Face model directory. Throws rill::Error naming the file and the problem.
  static Tokenizer from_hf_dir(const std::filesystem::path& dir);
  /// Builds a tokenizer from the text of a tokenizer.json (and optionally of a
  /// tokenizer_config.json); `source` names them in error messages.
  static Tokenizer from_hf_json(std::string_view tokenizer_json,
                                std::string_view tokenizer_config_json = {},
                                std::string_view source = "tokenizer.json");
  /// Loads a llama2.c tokenizer.bin (vocab_size must be given: the file does not store it).
  static Tokenizer from_llama2c(const std::filesystem::path& tokenizer_bin, int32_t vocab_size);

  /// Text -> ids. add_special_tokens applies the post-processor (e.g. BOS). Added tokens in
  /// the text (e.g. "<|im_start|>") are always recognised. Invalid UTF-8 input is first
  /// replaced like String::from_utf8_lossy (HF accepts only valid UTF-8).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// Ids -> text, like HF's Tokenizer::decode (invalid byte sequences become U+FFFD). Ids not
  /// in the vocabulary are skipped.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  /// One past the largest token id, added tokens included.
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// Raw vocab string; throws rill::Error(kInvalidArgument) for an unknown id.
  std::string id_to_token(int32_t id) const;
  /// True for special added tokens (skipped by decode when skip_special_tokens).
  bool is_special(int32_t id) const;
  /// From tokenizer_config.json bos_token / eos_token (string or {"content": ...}), else
  /// special_tokens_map.json; llama2.c: 1 and 2.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  /// True when `id` is a "<0xXX>" token that the decoder joins with neighbouring byte tokens
  /// before converting to text (ByteFallback): such runs decode as a whole.
  bool is_byte_fallback_token(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::TokenizerImpl> impl_;
};

/// Streams text as tokens arrive: push() returns only complete UTF-8 (never a broken code
/// point); the concatenation of all push() results followed by flush() equals decode(all ids)
/// exactly. With a non-empty `context` (e.g. the prompt ids), the output equals
/// decode(context + generated)[decode(context).size():] (so a first generated SentencePiece
/// token keeps its leading space).
///
/// How: like vLLM's detokenizer, each push decodes a short window of ids (a few already
/// emitted "anchor" tokens plus the pending ones) and emits the text beyond the anchor's
/// text. Text is held back while it ends in U+FFFD (an incomplete character may still be
/// completed) or in a run of byte-fallback tokens (decoded as a whole), and flush() settles
/// the rest against one full decode. Cost per push is O(window), not O(sequence).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens = true,
                         std::span<const int32_t> context = {});
  std::string push(int32_t id);
  std::string flush();

 private:
  bool visible(int32_t id) const;

  Tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // context + generated
  size_t context_size_;
  std::string context_text_;  // decode(context)
  size_t prefix_offset_ = 0;  // window start (anchor tokens)
  size_t read_offset_ = 0;    // tokens before this have been emitted
  std::string emitted_;       // everything returned so far
  bool in_sync_ = true;       // emitted_ is known to be a prefix of the final text
};

}  // namespace rill
