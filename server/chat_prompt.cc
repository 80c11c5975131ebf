#include "server/chat_prompt.h"

#include <cctype>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "engine/chat/chat_template.h"

namespace rill::server {

std::string BuiltinChatRenderer::render(const nlohmann::json& messages,
                                        bool add_generation_prompt) const {
  std::string out;
  for (const auto& m : messages) {
    std::string role = m.at("role").get<std::string>();
    for (char& c : role) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out += role + ":\n" + m.at("content").get<std::string>() + "\n\n";
  }
  if (add_generation_prompt) out += "ASSISTANT:\n";
  return out;
}

namespace {

// The model's own Jinja template (engine/chat). It writes BOS and the other special tokens
// itself, as transformers and vLLM render it, so the prompt is encoded without adding them.
class ModelChatRenderer final : public ChatRenderer {
 public:
  explicit ModelChatRenderer(ChatTemplate tmpl) : template_(std::move(tmpl)) {}
  std::string render(const nlohmann::json& messages, bool add_generation_prompt) const override {
    ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    return template_.render(messages, options);
  }
  bool has_special_tokens() const override { return true; }
  std::string name() const override { return "model"; }

 private:
  ChatTemplate template_;
};

}  // namespace

std::unique_ptr<ChatRenderer> make_chat_renderer(const Model& model) {
  if (std::filesystem::is_directory(model.path)) {
    try {
      return std::make_unique<ModelChatRenderer>(ChatTemplate::from_model_dir(model.path));
    } catch (const Error& e) {
      spdlog::info("chat: {}; using the built-in template", e.what());
    }
  }
  return std::make_unique<BuiltinChatRenderer>();
}

nlohmann::json normalize_chat_messages(const nlohmann::json& messages) {
  auto bad = [](const std::string& why) { throw Error(ErrorCode::kInvalidArgument, why); };
  if (!messages.is_array()) bad("'messages' must be an array");
  if (messages.empty()) bad("'messages' must not be empty");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where + " must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(where + ".role must be a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" &&
        role != "tool")
      bad(where + ".role must be system, developer, user, assistant or tool");
    std::string content;
    if (m.contains("content") && m["content"].is_string()) {
      content = m["content"].get<std::string>();
    } else if (m.contains("content") && m["content"].is_array()) {
      for (const auto& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad(where + ".content: only text parts are supported");
        content += part["text"].get<std::string>();
      }
    } else if (!(m.contains("content") && m["content"].is_null() && role == "assistant")) {
      bad(where + ".content must be a string or an array of text parts");
    }
    nlohmann::json n = m;
    n["content"] = content;
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace rill::server
