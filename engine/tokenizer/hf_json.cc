#include "engine/tokenizer/hf_json.h"

#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/util/utf8.h"

namespace rill {

using nlohmann::json;

const json& JsonReader::field(const json& j, const char* key, const char* what) const {
  if (!j.is_object() || !j.contains(key)) {
    fail(ErrorCode::kInvalidArgument, std::string(what) + " is missing \"" + key + "\"");
  }
  return j[key];
}

std::string JsonReader::str(const json& j, const char* key, const char* what) const {
  const json& v = field(j, key, what);
  if (!v.is_string())
    fail(ErrorCode::kInvalidArgument, std::string(what) + "." + key + " must be a string");
  return v.get<std::string>();
}

std::optional<std::string> JsonReader::opt_str(const json& j, const char* key) const {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_string())
    fail(ErrorCode::kInvalidArgument, std::string("\"") + key + "\" must be a string");
  return j[key].get<std::string>();
}

bool JsonReader::flag(const json& j, const char* key, bool fallback) const {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean())
    fail(ErrorCode::kInvalidArgument, std::string("\"") + key + "\" must be a boolean");
  return j[key].get<bool>();
}

int64_t JsonReader::integer(const json& j, const char* key, const char* what) const {
  const json& v = field(j, key, what);
  if (!v.is_number_integer())
    fail(ErrorCode::kInvalidArgument, std::string(what) + "." + key + " must be an integer");
  return v.get<int64_t>();
}

std::string JsonReader::type_of(const json& j, const char* what) const {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    fail(ErrorCode::kInvalidArgument, std::string(what) + " has no \"type\"");
  }
  return j["type"].get<std::string>();
}

char32_t JsonReader::single_char(const json& j, const char* key, const char* what) const {
  const std::string s = str(j, key, what);
  if (s.empty() || utf8::count(s) != 1) {
    fail(ErrorCode::kInvalidArgument, std::string(what) + "." + key + " must be one character");
  }
  return utf8::peek(s, 0);
}

std::unique_ptr<Regex> JsonReader::regex(const std::string& pattern, const char* what) const {
  try {
    return std::make_unique<Regex>(pattern);
  } catch (const Error& e) {
    fail(e.code(), std::string(what) + ": " + e.what());
  }
}

namespace {

std::vector<std::pair<std::string, std::string>> read_merges(const json& model,
                                                             const JsonReader& r) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (!model.contains("merges") || model["merges"].is_null()) return merges;
  const json& list = model["merges"];
  if (!list.is_array()) r.fail(ErrorCode::kInvalidArgument, "model.merges must be an array");
  merges.reserve(list.size());
  for (const json& m : list) {
    if (m.is_string()) {  // legacy "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        r.fail(ErrorCode::kInvalidArgument, "merge '" + s + "' has no space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(ErrorCode::kInvalidArgument,
             "merge " + m.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return merges;
}

std::unique_ptr<BpeModel> make_model(const json& j, const JsonReader& r) {
  if (!j.is_object()) r.fail(ErrorCode::kInvalidArgument, "\"model\" must be an object");
  // Old files omit the type of a BPE model.
  const std::string type = j.contains("type") ? r.type_of(j, "model") : "BPE";
  if (type != "BPE") r.fail(ErrorCode::kUnsupported, "unsupported model type '" + type + "'");
  const json& vocab_json = r.field(j, "vocab", "model");
  if (!vocab_json.is_object()) r.fail(ErrorCode::kInvalidArgument, "model.vocab must be an object");
  TokenMap vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer())
      r.fail(ErrorCode::kInvalidArgument, "model.vocab['" + token + "'] is not an integer");
    vocab.emplace(token, id.get<int32_t>());
  }
  BpeOptions options;
  options.unk_token = r.opt_str(j, "unk_token");
  options.continuing_subword_prefix = r.opt_str(j, "continuing_subword_prefix");
  options.end_of_word_suffix = r.opt_str(j, "end_of_word_suffix");
  options.fuse_unk = r.flag(j, "fuse_unk", false);
  options.byte_fallback = r.flag(j, "byte_fallback", false);
  options.ignore_merges = r.flag(j, "ignore_merges", false);
  try {
    return std::make_unique<BpeModel>(std::move(vocab), read_merges(j, r), std::move(options));
  } catch (const Error& e) {
    r.fail(e.code(), e.what());
  }
}

std::vector<AddedToken> read_added_tokens(const json& root, const JsonReader& r) {
  std::vector<AddedToken> tokens;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return tokens;
  const json& list = root["added_tokens"];
  if (!list.is_array()) r.fail(ErrorCode::kInvalidArgument, "added_tokens must be an array");
  for (const json& t : list) {
    AddedToken token;
    const int64_t id = r.integer(t, "id", "added token");
    if (id < 0 || id >= (int64_t{1} << 24))
      r.fail(ErrorCode::kInvalidArgument, "added token id out of range");
    token.id = static_cast<int32_t>(id);
    token.content = r.str(t, "content", "added token");
    token.special = r.flag(t, "special", false);
    token.single_word = r.flag(t, "single_word", false);
    token.lstrip = r.flag(t, "lstrip", false);
    token.rstrip = r.flag(t, "rstrip", false);
    token.normalized = r.flag(t, "normalized", !token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

json parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, source + ": invalid JSON: " + e.what());
  }
}

// bos_token / eos_token: "<s>", {"content": "<s>", ...} or null.
std::optional<std::string> special_token_name(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const detail::TokenizerImpl> load_hf_tokenizer(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               std::string_view special_map_json,
                                                               const std::string& source) {
  const JsonReader r(source);
  const json root = parse_json(tokenizer_json, source);
  if (!root.is_object()) r.fail(ErrorCode::kInvalidArgument, "top level must be an object");
  HfComponents c;
  c.model = make_model(r.field(root, "model", "tokenizer.json"), r);
  auto component = [&root](const char* key) -> const json& {
    static const json kNull;
    return root.contains(key) ? root[key] : kNull;
  };
  c.normalizer = make_normalizer(component("normalizer"), r);
  c.pre_tokenizer = make_pre_tokenizer(component("pre_tokenizer"), r);
  c.post_processor = make_post_processor(component("post_processor"), r);
  c.decoder = make_decoder(component("decoder"), r);
  c.added_tokens = read_added_tokens(root, r);
  auto impl = std::make_shared<HfTokenizer>(std::move(c));

  const json config = config_json.empty()
                          ? json::object()
                          : parse_json(config_json, source + " (tokenizer_config.json)");
  const json special_map =
      special_map_json.empty()
          ? json::object()
          : parse_json(special_map_json, source + " (special_tokens_map.json)");
  auto resolve = [&](const char* key) -> std::optional<int32_t> {
    auto name = special_token_name(config, key);
    if (!name) name = special_token_name(special_map, key);
    return name ? impl->token_to_id(*name) : std::nullopt;
  };
  impl->bos_id = resolve("bos_token");
  impl->eos_id = resolve("eos_token");
  return impl;
}

}  // namespace rill
