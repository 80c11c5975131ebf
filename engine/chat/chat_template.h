// A model's chat template: the Jinja template Hugging Face models ship (`chat_template` in
// tokenizer_config.json, or chat_template.jinja), rendered the way transformers'
// apply_chat_template(tokenize=False) does. Parsed once at construction; render() is const and
// thread-safe. No protocol types: the server hands in the request's messages as JSON.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace rill {

namespace jinja {
struct Node;
class Value;
}  // namespace jinja

/// What apply_chat_template passes to the template besides the messages.
struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  /// JSON schemas of the tools (a list), or null: the template sees `tools` = None.
  nlohmann::ordered_json tools = nullptr;
  /// RAG documents (a list), or null.
  nlohmann::ordered_json documents = nullptr;
  /// Extra template variables (an object), e.g. {"enable_thinking": false}; they override the
  /// special-token strings of the same name.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  /// Parses `source`. Special tokens (bos_token, eos_token, ...) become template variables.
  /// Throws rill::Error(kInvalidArgument) naming the line of a syntax error.
  explicit ChatTemplate(std::string source, std::string bos_token = {}, std::string eos_token = {},
                        nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  /// The template of a Hugging Face model directory: chat_template.jinja if present, else
  /// tokenizer_config.json's chat_template (a string, or a list of {name, template} from which
  /// the one named "default" is used); special tokens from tokenizer_config.json.
  /// Throws rill::Error(kInvalidArgument) when the model has no chat template.
  static ChatTemplate from_model_dir(const std::filesystem::path& dir);

  /// Renders the conversation. `messages` is a list of message objects passed through as the
  /// template sees them (content may be a string or a list of parts). Use ordered_json to keep
  /// the key order of tool schemas (tojson prints keys in their order, like Python dicts).
  /// Throws rill::Error(kInvalidArgument): the template's raise_exception message verbatim,
  /// "chat template line N: ..." for any other template error, or "chat template input: ..."
  /// when a value nests deeper than jinja::kMaxValueDepth (512) levels. No input or template
  /// makes the renderer recurse deeper than fixed bounds (see engine/chat/jinja_value.h,
  /// jinja_ast.h, jinja_eval.h).
  std::string render(const nlohmann::ordered_json& messages,
                     const ChatTemplateOptions& options = {}) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateOptions& options = {}) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  // Renders with `messages` converted by the caller's overload (both convert without
  // recursing deeper than the interpreter's value bound).
  std::string render_value(const std::function<jinja::Value()>& messages,
                           const ChatTemplateOptions& options) const;

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  nlohmann::ordered_json special_tokens_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> nodes_;
};

}  // namespace rill
