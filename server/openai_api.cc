#include "server/openai_api.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "engine/runner/runner.h"

namespace rill::server {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw FieldError(field, "'" + field + "' " + why);
}

bool present(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

int64_t get_int(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) bad(key, "must be an integer");
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
      bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return static_cast<int64_t>(d);
  }
  if (!v.is_number_integer()) bad(key, "must be an integer");
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

float get_float(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) bad(key, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(key, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return static_cast<float>(d);
}

bool get_bool(const json& j, const char* key) {
  if (!j[key].is_boolean()) bad(key, "must be a boolean");
  return j[key].get<bool>();
}

std::vector<int32_t> int_list(const json& v, const char* key) {
  std::vector<int32_t> ids;
  for (const json& x : v) {
    if (!x.is_number_integer()) bad(key, "must be a list of integer token ids");
    const int64_t id = x.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max())
      bad(key, "has a token id out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// "prompt": a string, a list of token ids, or a list holding one of those (n = 1 prompt only).
std::vector<int32_t> completion_prompt(ServingContext& ctx, const json& body) {
  if (!body.contains("prompt")) bad("prompt", "is required");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  std::vector<int32_t> ids;
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) bad("prompt", "must not be empty");
    ids = ctx.encode_prompt(p.get<std::string>());
  } else if (p.is_array()) {
    if (p.empty()) bad("prompt", "must not be empty");
    if (p[0].is_string() || p[0].is_array())
      bad("prompt", "must be one prompt (batches are not supported)");
    ids = int_list(p, "prompt");
  } else {
    bad("prompt", "must be a string or a list of token ids");
  }
  ctx.check_prompt(ids, "prompt");
  return ids;
}

std::vector<int32_t> chat_prompt(ServingContext& ctx, const json& body) {
  if (!body.contains("messages")) bad("messages", "is required");
  json messages;
  try {
    messages = normalize_chat_messages(body["messages"]);
  } catch (const Error& e) {
    throw FieldError("messages", e.what());
  }
  std::string text;
  try {
    text = ctx.chat().render(messages, /*add_generation_prompt=*/true);
  } catch (const Error& e) {
    throw FieldError("messages", e.what());
  }
  if (text.empty()) bad("messages", "render to an empty prompt");
  std::vector<int32_t> ids = ctx.encode_prompt(text, ctx.chat().has_special_tokens());
  ctx.check_prompt(ids, "messages");
  return ids;
}

void parse_sampling(const json& b, SamplingParams& s) {
  if (present(b, "temperature")) s.temperature = get_float(b, "temperature", 0, 100);
  if (present(b, "top_p")) s.top_p = get_float(b, "top_p", 0, 1);
  if (present(b, "top_k")) {
    const int64_t k = get_int(b, "top_k", -1, std::numeric_limits<int32_t>::max());
    s.top_k = k < 0 ? 0 : static_cast<int>(k);  // vLLM: -1 is off
  }
  if (present(b, "min_p")) s.min_p = get_float(b, "min_p", 0, 1);
  if (present(b, "presence_penalty")) s.presence_penalty = get_float(b, "presence_penalty", -2, 2);
  if (present(b, "frequency_penalty"))
    s.frequency_penalty = get_float(b, "frequency_penalty", -2, 2);
  if (present(b, "repetition_penalty"))
    s.repetition_penalty = get_float(b, "repetition_penalty", 0.01, 100);
  if (present(b, "seed"))
    s.seed = static_cast<uint64_t>(get_int(b, "seed", std::numeric_limits<int64_t>::min(),
                                           std::numeric_limits<int64_t>::max()));
  try {
    s.validate();
  } catch (const Error& e) {
    throw FieldError("", e.what());
  }
}

void parse_stop(const json& b, Request& r) {
  if (!present(b, "stop")) return;
  const json& v = b["stop"];
  if (v.is_string()) {
    if (!v.get_ref<const std::string&>().empty()) r.stop.push_back(v.get<std::string>());
    return;
  }
  if (!v.is_array()) bad("stop", "must be a string or a list of strings");
  if (v.size() > 16) bad("stop", "has more than 16 strings");
  for (const json& s : v) {
    if (!s.is_string()) bad("stop", "must be a string or a list of strings");
    if (!s.get_ref<const std::string&>().empty()) r.stop.push_back(s.get<std::string>());
  }
}

void parse_cache(const json& b, Request& r) {
  if (!present(b, "cache")) return;
  const json& c = b["cache"];
  if (!c.is_object()) bad("cache", "must be an object {\"policy\", \"n_sink\", \"window\"}");
  const std::string policy = c.value("policy", std::string("full"));
  if (policy == "full") {
    r.cache = CachePolicy::full();
  } else if (policy == "streaming") {
    if (!present(c, "window")) bad("cache.window", "is required with the streaming policy");
    const int64_t n_sink = present(c, "n_sink") ? get_int(c, "n_sink", 0, 1 << 20) : 4;
    const int64_t window = get_int(c, "window", 1, std::numeric_limits<int32_t>::max());
    r.cache = CachePolicy::streaming(static_cast<int>(n_sink), static_cast<int>(window));
  } else {
    bad("cache.policy", "must be \"full\" or \"streaming\"");
  }
}

}  // namespace

ApiRequest parse_api_request(ServingContext& ctx, ApiKind kind, const std::string& body_text) {
  json b;
  try {
    b = json::parse(body_text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("invalid JSON body: ") + e.what());
  }
  if (!b.is_object()) throw Error(ErrorCode::kInvalidArgument, "the body must be a JSON object");
  ServingEngine& engine = ctx.require_engine();
  ApiRequest a;
  a.kind = kind;
  a.model = ctx.model().served_name;
  if (present(b, "model")) {
    if (!b["model"].is_string()) bad("model", "must be a string");
    if (b["model"].get<std::string>() != a.model)
      throw FieldError("model", "The model '" + b["model"].get<std::string>() + "' does not exist",
                       ErrorCode::kNotFound);
  }
  if (present(b, "n") && get_int(b, "n", 1, 1) != 1) bad("n", "must be 1");
  if (present(b, "best_of") && get_int(b, "best_of", 1, 1) != 1) bad("best_of", "must be 1");
  if (present(b, "echo") && get_bool(b, "echo")) bad("echo", "is not supported");
  if (present(b, "suffix")) bad("suffix", "is not supported");
  if (present(b, "stream")) a.stream = get_bool(b, "stream");
  if (present(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!so.is_object()) bad("stream_options", "must be an object");
    if (present(so, "include_usage")) a.include_usage = get_bool(so, "include_usage");
  }
  if (present(b, "return_token_ids")) a.return_token_ids = get_bool(b, "return_token_ids");
  Request& r = a.request;
  r.id = ctx.new_request_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  r.prompt = kind == ApiKind::kChat ? chat_prompt(ctx, b) : completion_prompt(ctx, b);
  r.max_tokens = 16;  // OpenAI's default for completions; chat: up to the context
  if (kind == ApiKind::kChat) r.max_tokens = 256;
  const int64_t kMaxTokens = 1 << 24;
  if (present(b, "max_tokens"))
    r.max_tokens = static_cast<int>(get_int(b, "max_tokens", 0, kMaxTokens));
  if (present(b, "max_completion_tokens"))
    r.max_tokens = static_cast<int>(get_int(b, "max_completion_tokens", 0, kMaxTokens));
  if (present(b, "min_tokens"))
    r.min_tokens = static_cast<int>(get_int(b, "min_tokens", 0, kMaxTokens));
  parse_sampling(b, r.sampling);
  parse_stop(b, r);
  if (present(b, "stop_token_ids")) {
    if (!b["stop_token_ids"].is_array())
      bad("stop_token_ids", "must be a list of integer token ids");
    r.stop_token_ids = int_list(b["stop_token_ids"], "stop_token_ids");
    for (int32_t id : r.stop_token_ids)
      if (id < 0 || id >= engine.tokenizer().vocab_size())
        bad("stop_token_ids", "has a token id out of range");
  }
  if (present(b, "ignore_eos")) r.ignore_eos = get_bool(b, "ignore_eos");
  if (present(b, "skip_special_tokens")) r.skip_special_tokens = get_bool(b, "skip_special_tokens");
  if (present(b, "priority"))
    r.priority = static_cast<int>(get_int(b, "priority", -1'000'000, 1'000'000));
  parse_cache(b, r);
  // Log-probabilities: completions "logprobs": N; chat "logprobs": bool + "top_logprobs": N.
  if (kind == ApiKind::kCompletion) {
    if (present(b, "logprobs"))
      a.top_logprobs = static_cast<int>(get_int(b, "logprobs", 0, kMaxTopLogprobs));
  } else {
    const bool on = present(b, "logprobs") && get_bool(b, "logprobs");
    const int top = present(b, "top_logprobs")
                        ? static_cast<int>(get_int(b, "top_logprobs", 0, kMaxTopLogprobs))
                        : 0;
    if (present(b, "top_logprobs") && !on) bad("top_logprobs", "needs \"logprobs\": true");
    if (on) a.top_logprobs = top;
  }
  r.logprobs = a.top_logprobs;
  // A full cache holds prompt + generated tokens within the context (vLLM answers 400 too).
  const int context = ctx.model().context_length;
  if (!r.cache.is_streaming() && context > 0 &&
      static_cast<int64_t>(r.prompt.size()) + r.max_tokens > context) {
    if (present(b, "max_tokens") || present(b, "max_completion_tokens"))
      throw FieldError(present(b, "max_tokens") ? "max_tokens" : "max_completion_tokens",
                       "This model's maximum context length is " + std::to_string(context) +
                           " tokens; the prompt has " + std::to_string(r.prompt.size()) + " and " +
                           std::to_string(r.max_tokens) + " more were requested");
    r.max_tokens = std::max(0, context - static_cast<int>(r.prompt.size()));
  }
  return a;
}

ApiResponder::ApiResponder(const ApiRequest& req, const Tokenizer& tok, std::string id)
    : kind_(req.kind),
      stream_(req.stream),
      include_usage_(req.include_usage),
      return_ids_(req.return_token_ids),
      top_logprobs_(req.top_logprobs),
      model_(req.model),
      id_(std::move(id)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      tok_(tok) {}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ApiResponder::sse(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

json ApiResponder::envelope(bool chunk) const {
  const char* object = kind_ == ApiKind::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ApiResponder::logprobs_json(const std::vector<int32_t>& ids,
                                 const std::vector<SampleLogprobs>& lps, size_t text_offset) const {
  if (top_logprobs_ < 0 || lps.empty()) return nullptr;
  auto piece = [&](int32_t id) { return tok_.decode(std::vector<int32_t>{id}, false); };
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  const size_t n = std::min(ids.size(), lps.size());
  if (kind_ == ApiKind::kChat) {
    json content = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string t = piece(ids[i]);
      json top = json::array();
      for (int k = 0; k < top_logprobs_ && k < static_cast<int>(lps[i].top.size()); ++k) {
        const std::string tt = piece(lps[i].top[k].token);
        top.push_back({{"token", tt}, {"logprob", lps[i].top[k].logprob}, {"bytes", bytes(tt)}});
      }
      content.push_back(
          {{"token", t}, {"logprob", lps[i].sampled}, {"bytes", bytes(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  size_t offset = text_offset;
  for (size_t i = 0; i < n; ++i) {
    const std::string t = piece(ids[i]);
    tokens.push_back(t);
    token_logprobs.push_back(lps[i].sampled);
    json top = json::object();
    for (int k = 0; k < top_logprobs_ && k < static_cast<int>(lps[i].top.size()); ++k)
      top[piece(lps[i].top[k].token)] = lps[i].top[k].logprob;
    top_logprobs.push_back(top_logprobs_ > 0 ? top : json(nullptr));
    offsets.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

std::string ApiResponder::start() {
  if (!stream_ || kind_ != ApiKind::kChat) return {};
  json j = envelope(true);
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return sse(j);
}

std::string ApiResponder::chunk(const TokenChunk& c) {
  if (!stream_) {
    text_ += c.text;
    ids_.insert(ids_.end(), c.ids.begin(), c.ids.end());
    logprobs_.insert(logprobs_.end(), c.logprobs.begin(), c.logprobs.end());
    return {};
  }
  json choice = {{"index", 0},
                 {"logprobs", logprobs_json(c.ids, c.logprobs, text_.size())},
                 {"finish_reason", nullptr}};
  if (kind_ == ApiKind::kChat)
    choice["delta"] = {{"content", c.text}};
  else
    choice["text"] = c.text;
  if (return_ids_) choice["token_ids"] = c.ids;
  text_ += c.text;  // for completion text offsets
  json j = envelope(true);
  j["choices"] = json::array({choice});
  return sse(j);
}

std::string ApiResponder::final(const FinalEvent& f) {
  const char* reason = finish_reason_name(f.reason);
  const json usage = {{"prompt_tokens", f.usage.prompt_tokens},
                      {"completion_tokens", f.usage.completion_tokens},
                      {"total_tokens", f.usage.prompt_tokens + f.usage.completion_tokens},
                      {"evicted_tokens", f.usage.evicted_tokens}};
  if (stream_) {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", reason}};
    if (kind_ == ApiKind::kChat)
      choice["delta"] = json::object();
    else
      choice["text"] = "";
    if (return_ids_) choice["token_ids"] = json::array();
    json j = envelope(true);
    j["choices"] = json::array({choice});
    std::string out = sse(j);
    if (include_usage_) {
      json u = envelope(true);
      u["choices"] = json::array();
      u["usage"] = usage;
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  }
  json choice = {
      {"index", 0}, {"logprobs", logprobs_json(ids_, logprobs_, 0)}, {"finish_reason", reason}};
  if (kind_ == ApiKind::kChat)
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
  else
    choice["text"] = text_;
  if (return_ids_) choice["token_ids"] = ids_;
  json j = envelope(false);
  j["choices"] = json::array({choice});
  j["usage"] = usage;
  return dump_json(j);
}

std::string error_body(const ErrorReply& e) {
  return dump_json({{"error",
                     {{"message", e.message},
                      {"type", e.type},
                      {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                      {"code", e.code}}}});
}

std::string sse_error(const ErrorReply& e) {
  return "data: " + error_body(e) + "\n\ndata: [DONE]\n\n";
}

std::string models_body(const ServingContext& ctx) {
  const json model = {{"id", ctx.model().served_name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "rill"},
                      {"max_model_len", ctx.model().context_length}};
  return dump_json({{"object", "list"}, {"data", json::array({model})}});
}

}  // namespace rill::server
