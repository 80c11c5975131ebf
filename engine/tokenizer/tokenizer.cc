#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "engine/tokenizer/hf_json.h"
#include "engine/tokenizer/llama2c.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, path.string() + ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string read_optional(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? read_file(path) : std::string();
}

}  // namespace

Tokenizer Tokenizer::from_hf_dir(const std::filesystem::path& dir) {
  const std::filesystem::path json_path = dir / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(json_path, ec)) {
    throw Error(ErrorCode::kNotFound,
                json_path.string() + ": no tokenizer.json in model directory");
  }
  const std::string config = read_optional(dir / "tokenizer_config.json");
  const std::string special_map = read_optional(dir / "special_tokens_map.json");
  return Tokenizer(
      load_hf_tokenizer(read_file(json_path), config, special_map, json_path.string()));
}

Tokenizer Tokenizer::from_hf_json(std::string_view tokenizer_json,
                                  std::string_view tokenizer_config_json, std::string_view source) {
  return Tokenizer(
      load_hf_tokenizer(tokenizer_json, tokenizer_config_json, {}, std::string(source)));
}

Tokenizer Tokenizer::from_llama2c(const std::filesystem::path& tokenizer_bin, int32_t vocab_size) {
  return Tokenizer(Llama2cTokenizer::load(tokenizer_bin, vocab_size));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (impl_->accepts_raw_bytes() || utf8::is_valid(text)) {
    return impl_->encode(text, add_special_tokens);
  }
  return impl_->encode(utf8::from_lossy(text), add_special_tokens);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  auto token = impl_->id_to_token(id);
  if (!token) {
    throw Error(ErrorCode::kInvalidArgument, "tokenizer: id " + std::to_string(id) +
                                                 " is not in the vocabulary (size " +
                                                 std::to_string(vocab_size()) + ")");
  }
  return *token;
}

bool Tokenizer::is_special(int32_t id) const {
  return impl_->is_special(id);
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos_id;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos_id;
}
bool Tokenizer::is_byte_fallback_token(int32_t id) const {
  return impl_->is_byte_fallback_token(id);
}

}  // namespace rill
