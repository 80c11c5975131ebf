#include "engine/tokenizer/hf_tokenizer.h"

#include <algorithm>

namespace rill {

HfTokenizer::HfTokenizer(HfComponents components)
    : c_(std::move(components)), added_(c_.added_tokens, c_.normalizer.get()) {
  vocab_size_ = c_.model->id_limit();
  for (const AddedToken& t : c_.added_tokens) vocab_size_ = std::max(vocab_size_, t.id + 1);
}

void HfTokenizer::encode_text(std::string_view text, bool at_start,
                              std::vector<int32_t>& ids) const {
  std::vector<PreToken> pieces{{std::string(text), at_start}};
  if (c_.pre_tokenizer) c_.pre_tokenizer->pre_tokenize(pieces);
  for (const PreToken& piece : pieces) c_.model->tokenize(piece.text, ids);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  // Added tokens with normalized=false are found in the raw text; the rest is normalized,
  // then searched for normalized=true added tokens, then pre-tokenized and encoded.
  for (const Segment& raw : added_.split(text, /*normalized_set=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string normalized =
        c_.normalizer ? c_.normalizer->normalize(raw.text) : std::string(raw.text);
    for (const Segment& piece : added_.split(normalized, /*normalized_set=*/true)) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
      } else {
        encode_text(piece.text, raw.offset == 0 && piece.offset == 0, ids);
      }
    }
  }
  if (c_.post_processor) c_.post_processor->process(ids, add_special_tokens);
  return ids;
}

const std::string* HfTokenizer::token_string(int32_t id) const {
  if (const AddedToken* t = added_.find_by_id(id)) return &t->content;
  return c_.model->id_to_token(id);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = token_string(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && added_.is_special_content(*token)) continue;
    tokens.push_back(*token);
  }
  std::string text;
  if (c_.decoder) {
    c_.decoder->decode_chain(tokens);
    for (const auto& t : tokens) text += t;
    return text;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.find_by_content(token)) return id;
  return c_.model->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  const std::string* token = token_string(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool HfTokenizer::is_special(int32_t id) const {
  const std::string* token = token_string(id);
  return token != nullptr && added_.is_special_content(*token);
}

bool HfTokenizer::is_byte_fallback_token(int32_t id) const {
  if (!c_.decoder || !c_.decoder->has_byte_fallback()) return false;
  const std::string* token = token_string(id);
  return token != nullptr && parse_byte_token(*token) >= 0;
}

}  // namespace rill
