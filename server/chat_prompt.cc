#include "server/chat_prompt.h"

#include <algorithm>
#include <cctype>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "engine/chat/chat_template.h"
#include "engine/error.h"
#include "server/json_body.h"

namespace rill::server {

std::string BuiltinChatRenderer::render(const nlohmann::json& messages, bool add_generation_prompt,
                                        const nlohmann::ordered_json& /*tools*/) const {
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

// nlohmann::json keeps keys sorted, so a message's tool calls would reach a template that prints
// them with tojson as {"arguments": .., "name": ..}. This copy puts them back in OpenAI's order
// (role, content, tool_calls [{id, type, function {name, arguments}}], tool_call_id, the rest),
// the order clients send and transformers users write. With `object_arguments` each call's
// "arguments" JSON string is parsed into an object (in its own key order), the form templates
// that print arguments with tojson or items expect.
nlohmann::ordered_json ordered_messages(const nlohmann::json& messages, bool object_arguments) {
  using ojson = nlohmann::ordered_json;
  const auto reorder = [](const nlohmann::json& in, std::initializer_list<const char*> first) {
    ojson out = ojson::object();
    for (const char* k : first)
      if (in.contains(k)) out[k] = ojson::parse(in[k].dump());  // depth bounded by the body's
    for (auto it = in.begin(); it != in.end(); ++it)
      if (!out.contains(it.key())) out[it.key()] = ojson::parse(it.value().dump());
    return out;
  };
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson m = reorder(messages[i], {"role", "content", "name", "tool_calls", "tool_call_id"});
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      const nlohmann::json& calls = messages[i]["tool_calls"];
      for (size_t j = 0; j < calls.size(); ++j) {
        ojson call = reorder(calls[j], {"id", "type", "function"});
        call["function"] = reorder(calls[j]["function"], {"name", "arguments"});
        ojson& args = call["function"]["arguments"];
        if (object_arguments && args.is_string()) {
          const std::string text = args.get<std::string>();
          ojson parsed = nullptr;
          if (json_nesting_depth(text, kMaxJsonDepth) <= kMaxJsonDepth)
            parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
          if (!parsed.is_object())
            throw Error(ErrorCode::kInvalidArgument,
                        "messages[" + std::to_string(i) + "].tool_calls[" + std::to_string(j) +
                            "].function.arguments must be a JSON object (as a string) at most " +
                            std::to_string(kMaxJsonDepth) + " levels deep");
          args = std::move(parsed);
        }
        m["tool_calls"][j] = std::move(call);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

bool has_tool_calls(const nlohmann::json& messages) {
  for (const auto& m : messages)
    if (m.contains("tool_calls")) return true;
  return false;
}

// The probe call's render with `arguments`, or "" when the template rejects it.
std::string render_probe(const ChatTemplate& tmpl, const nlohmann::json& arguments) {
  const nlohmann::json messages = {
      {{"role", "user"}, {"content", "probe"}},
      {{"role", "assistant"},
       {"content", ""},
       {"tool_calls",
        {{{"id", "probe0001"},
          {"type", "function"},
          {"function", {{"name", "probe_fn"}, {"arguments", arguments}}}}}}}};
  // Some templates need the tools they render calls of.
  ChatTemplateOptions options;
  options.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "probe_fn", "description": "Probe.",
          "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}}}}}])");
  try {
    return tmpl.render(messages, options);
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

// Templates written for objects print them with tojson, items or their own syntax; templates
// written for strings print an object as Python's repr ({'probe_arg': ...}) or not at all. As
// vLLM does, the first kind gets objects even when it would also print a string: the model then
// sees its calls in the template's own format.
bool template_wants_object_arguments(const ChatTemplate& tmpl) {
  const std::string out = render_probe(tmpl, {{"probe_arg", "probe_value"}});
  return out.find("probe_value") != std::string::npos &&
         out.find("'probe_arg'") == std::string::npos;
}

namespace {

// The model's own Jinja template (engine/chat). It writes BOS and the other special tokens
// itself, as transformers and vLLM render it, so the prompt is encoded without adding them.
class ModelChatRenderer final : public ChatRenderer {
 public:
  explicit ModelChatRenderer(ChatTemplate tmpl)
      : template_(std::move(tmpl)), object_arguments_(template_wants_object_arguments(template_)) {}
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools) const override {
    ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    options.tools = tools;
    if (!has_tool_calls(messages)) return template_.render(messages, options);
    return template_.render(ordered_messages(messages, object_arguments_), options);
  }
  bool has_special_tokens() const override { return true; }
  std::string name() const override { return "model"; }
  std::string template_source() const override { return template_.source(); }

 private:
  ChatTemplate template_;
  bool object_arguments_;
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

namespace {

// An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
// "arguments": a JSON string (or an object)}}].
void check_tool_calls(const nlohmann::json& calls, const std::string& where) {
  auto bad = [](const std::string& why) { throw Error(ErrorCode::kInvalidArgument, why); };
  if (!calls.is_array()) bad(where + ".tool_calls must be an array");
  for (size_t j = 0; j < calls.size(); ++j) {
    const nlohmann::json& c = calls[j];
    const std::string at = where + ".tool_calls[" + std::to_string(j) + "]";
    if (!c.is_object()) bad(at + " must be an object");
    if (c.contains("id") && !c["id"].is_string()) bad(at + ".id must be a string");
    if (c.contains("type") && c["type"] != "function") bad(at + ".type must be \"function\"");
    if (!c.contains("function") || !c["function"].is_object())
      bad(at + ".function must be an object");
    const nlohmann::json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) bad(at + ".function.name must be a string");
    if (!f.contains("arguments") || !(f["arguments"].is_string() || f["arguments"].is_object()))
      bad(at + ".function.arguments must be a JSON string");
  }
}

}  // namespace

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
    } else if (!(role == "assistant" && (!m.contains("content") || m["content"].is_null()) &&
                 (m.contains("content") || m.contains("tool_calls")))) {
      bad(where + ".content must be a string or an array of text parts");
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (role != "assistant") bad(where + ".tool_calls is only for assistant messages");
      check_tool_calls(m["tool_calls"], where);
    }
    if (m.contains("tool_call_id") && !m["tool_call_id"].is_string())
      bad(where + ".tool_call_id must be a string");
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
                            const std::string& reply_end, const nlohmann::json& new_messages,
                            const nlohmann::ordered_json& tools) {
  nlohmann::json all = history;
  for (const auto& m : new_messages) all.push_back(m);
  const std::string full = renderer.render(all, /*add_generation_prompt=*/true, tools);
  if (history.empty()) return full;
  std::string delta;
  const nlohmann::json& last = history.back();
  if (last.at("role") == "assistant") {
    nlohmann::json prior = history;
    prior.erase(prior.size() - 1);
    const std::string fed = renderer.render(prior, /*add_generation_prompt=*/true, tools) +
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
    const std::string closed = renderer.render(history, /*add_generation_prompt=*/false, tools);
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
