#include "engine/chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_eval.h"
#include "engine/chat/jinja_parser.h"
#include "engine/error.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, "cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string token_string(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

std::string pick_template(const ordered_json& t, const fs::path& config) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& entry : t)
      if (entry.value("name", "") == "default" && entry.contains("template"))
        return entry["template"].get<std::string>();
    throw Error(ErrorCode::kInvalidArgument,
                config.string() + ": the model has several chat templates and none named default");
  }
  throw Error(ErrorCode::kInvalidArgument, config.string() + ": chat_template is not a string");
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token,
                           nlohmann::ordered_json special_tokens)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      special_tokens_(std::move(special_tokens)) {
  try {
    nodes_ = std::make_shared<const jinja::NodeList>(jinja::parse_template(source_));
  } catch (const jinja::TemplateError& e) {
    throw Error(ErrorCode::kInvalidArgument,
                "chat template syntax error at line " + std::to_string(e.line()) + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("chat template: ") + e.what());
  }
}

ChatTemplate ChatTemplate::from_model_dir(const fs::path& dir) {
  const fs::path config_path = dir / "tokenizer_config.json";
  ordered_json config = ordered_json::object();
  if (fs::exists(config_path)) {
    try {
      config = ordered_json::parse(read_file(config_path));
    } catch (const ordered_json::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, config_path.string() + ": " + e.what());
    }
  }
  std::string source;
  if (fs::exists(dir / "chat_template.jinja")) {
    source = read_file(dir / "chat_template.jinja");
  } else if (config.contains("chat_template")) {
    source = pick_template(config["chat_template"], config_path);
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "model " + dir.string() +
                    " has no chat template (no chat_template.jinja, no chat_template in "
                    "tokenizer_config.json)");
  }
  ordered_json special = ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (config.contains(key) && !token_string(config[key]).empty())
      special[key] = token_string(config[key]);
  }
  const std::string bos = special.value("bos_token", "");
  const std::string eos = special.value("eos_token", "");
  return ChatTemplate(std::move(source), bos, eos, std::move(special));
}

std::string ChatTemplate::render(const ordered_json& messages,
                                 const ChatTemplateOptions& options) const {
  if (!messages.is_array())
    throw Error(ErrorCode::kInvalidArgument, "chat messages must be a list");
  return render_value([&] { return jinja::Value::from_json(messages); }, options);
}

std::string ChatTemplate::render(const nlohmann::json& messages,
                                 const ChatTemplateOptions& options) const {
  if (!messages.is_array())
    throw Error(ErrorCode::kInvalidArgument, "chat messages must be a list");
  return render_value([&] { return jinja::Value::from_json(messages); }, options);
}

std::string ChatTemplate::render_value(const std::function<jinja::Value()>& messages,
                                       const ChatTemplateOptions& options) const {
  using jinja::Value;
  // Declared before the scopes so that it is destroyed after them (see NamespaceRegistry).
  jinja::NamespaceRegistry namespaces;
  auto globals = std::make_shared<jinja::Scope>();
  for (auto& [name, fn] : jinja::global_functions(&namespaces)) globals->set(name, fn);
  // Like transformers' special_tokens_map: a token the model does not have stays undefined.
  if (!bos_token_.empty()) globals->set("bos_token", Value(bos_token_));
  if (!eos_token_.empty()) globals->set("eos_token", Value(eos_token_));
  try {
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
      globals->set(it.key(), Value::from_json(it.value()));
    if (options.extra.is_object())
      for (auto it = options.extra.begin(); it != options.extra.end(); ++it)
        globals->set(it.key(), Value::from_json(it.value()));
    globals->set("messages", messages());
    globals->set("tools", Value::from_json(options.tools));
    globals->set("documents", Value::from_json(options.documents));
  } catch (const jinja::TemplateError& e) {  // the inputs nest deeper than the value bound
    throw Error(ErrorCode::kInvalidArgument, std::string("chat template input: ") + e.what());
  }
  globals->set("add_generation_prompt", Value(options.add_generation_prompt));
  try {
    return jinja::render_template(*nodes_, globals);
  } catch (const jinja::TemplateError& e) {
    if (e.raised_by_template()) throw Error(ErrorCode::kInvalidArgument, e.what());
    throw Error(ErrorCode::kInvalidArgument,
                "chat template line " + std::to_string(e.line()) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, "chat template: out of memory while rendering");
  } catch (const std::exception& e) {  // a library error the interpreter did not anticipate
    throw Error(ErrorCode::kInvalidArgument, std::string("chat template: ") + e.what());
  }
}

}  // namespace rill
