// tokenizer.json parsing: builds the HfTokenizer pipeline from the JSON that Hugging Face
// tokenizers writes. Unknown or unsupported component types raise a rill::Error naming the
// source file, the component kind and the type.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace rill {

/// Parses tokenizer.json text; config texts may be empty. `source` prefixes error messages.
std::shared_ptr<const detail::TokenizerImpl> load_hf_tokenizer(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               std::string_view special_map_json,
                                                               const std::string& source);

/// Typed access to JSON fields with errors that name the source file.
class JsonReader {
 public:
  explicit JsonReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(ErrorCode code, const std::string& message) const {
    throw Error(code, source_ + ": " + message);
  }
  const nlohmann::json& field(const nlohmann::json& j, const char* key, const char* what) const;
  std::string str(const nlohmann::json& j, const char* key, const char* what) const;
  /// Missing or null -> nullopt.
  std::optional<std::string> opt_str(const nlohmann::json& j, const char* key) const;
  bool flag(const nlohmann::json& j, const char* key, bool fallback) const;
  int64_t integer(const nlohmann::json& j, const char* key, const char* what) const;
  std::string type_of(const nlohmann::json& j, const char* what) const;
  /// A single code point given as a one-character string.
  char32_t single_char(const nlohmann::json& j, const char* key, const char* what) const;
  std::unique_ptr<Regex> regex(const std::string& pattern, const char* what) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

// Component factories (hf_json_components.cc). A null JSON value -> nullptr.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const JsonReader& r);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const JsonReader& r);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const JsonReader& r);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const JsonReader& r);

}  // namespace rill
