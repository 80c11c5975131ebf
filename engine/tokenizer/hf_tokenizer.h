// The Hugging Face tokenizers pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE
// model -> post-processor, and ids -> tokens -> decoder for the way back.
#pragma once

#include <memory>
#include <vector>

#include "engine/tokenizer/added_vocab.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace rill {

struct HfComponents {
  std::unique_ptr<Normalizer> normalizer;         // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;    // may be null
  std::unique_ptr<BpeModel> model;                // never null
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens joined with ' '
  std::vector<AddedToken> added_tokens;
};

class HfTokenizer : public detail::TokenizerImpl {
 public:
  explicit HfTokenizer(HfComponents components);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  bool is_byte_fallback_token(int32_t id) const override;

 private:
  const std::string* token_string(int32_t id) const;
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;

  HfComponents c_;
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
};

}  // namespace rill
