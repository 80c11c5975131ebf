#include "server/chat_prompt.h"

#include <algorithm>
#include <cctype>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "engine/chat/chat_template.h"
#include "engine/error.h"

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
        // Compared as JSON: json::value() would throw for a "type" that is not a string.
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string())
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

namespace {

bool is_system(const nlohmann::json& m) {
  const std::string role = m.at("role").get<std::string>();
  return role == "system" || role == "developer";
}

size_t common_prefix(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

std::string chat_turn_delta(const ChatRenderer& renderer, const nlohmann::json& history,
                            const std::string& reply_end, const nlohmann::json& new_messages) {
  nlohmann::json all = history;
  for (const auto& m : new_messages) all.push_back(m);
  const std::string full = renderer.render(all, /*add_generation_prompt=*/true);
  if (history.empty()) return full;
  std::string delta;
  const nlohmann::json& last = history.back();
  if (last.at("role") == "assistant") {
    nlohmann::json prior = history;
    prior.erase(prior.size() - 1);
    const std::string fed = renderer.render(prior, /*add_generation_prompt=*/true) +
                            last.at("content").get<std::string>();
    // The stop token is the template's own closing (ChatML's <|im_end|>): not fed twice. A stop
    // token the template does not write (a plain EOS) stays in the cache before the closing.
    if (!reply_end.empty() && full.compare(0, fed.size() + reply_end.size(), fed + reply_end) == 0)
      delta = full.substr(fed.size() + reply_end.size());
    else if (full.compare(0, fed.size(), fed) == 0)
      delta = full.substr(fed.size());
  }
  if (delta.empty()) {
    // The template rewrote the reply (trimmed it, say): what follows the rendered history is
    // new. The reply's closing tokens, if the model did not generate them, are not fed.
    const std::string closed = renderer.render(history, /*add_generation_prompt=*/false);
    delta = full.substr(common_prefix(full, closed));
  }
  if (delta.empty()) throw Error(ErrorCode::kInvalidArgument, "the messages add nothing to render");
  return delta;
}

nlohmann::json next_chat_history(const nlohmann::json& history, const nlohmann::json& new_messages,
                                 const std::string& reply) {
  nlohmann::json system, turn;
  for (const auto& m : history) {
    if (is_system(m))
      system = m;
    else if (m.at("role") != "assistant")
      turn = m;
  }
  for (const auto& m : new_messages) (is_system(m) ? system : turn) = m;
  nlohmann::json out = nlohmann::json::array();
  if (!system.is_null()) out.push_back(system);
  if (!turn.is_null()) out.push_back(turn);
  out.push_back({{"role", "assistant"}, {"content", reply}});
  return out;
}

}  // namespace rill::server
