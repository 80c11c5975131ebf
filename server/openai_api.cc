#include "server/openai_api.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "engine/serving/request.h"
#include "server/json_body.h"
#include "server/json_fields.h"
#include "server/request_fields.h"
#include "server/sampling_json.h"
#include "server/constraint_fields.h"
#include "server/tool_calls.h"

namespace rill::server {
namespace {

using nlohmann::json;

// "prompt": a string, a list of token ids, or a list holding one of those (n = 1 prompt only).
// Returns the one prompt: a non-empty string or a non-empty list of ids.
json one_prompt(const json& body) {
  if (!body.contains("prompt")) bad_field("prompt", "is required");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) bad_field("prompt", "must not be empty");
  } else if (p.is_array()) {
    if (p.empty()) bad_field("prompt", "must not be empty");
    if (p[0].is_string() || p[0].is_array())
      bad_field("prompt", "must be one prompt (batches are not supported)");
  } else {
    bad_field("prompt", "must be a string or a list of token ids");
  }
  return p;
}

std::vector<int32_t> completion_prompt(ServingContext& ctx, const json& body) {
  const json p = one_prompt(body);
  std::vector<int32_t> ids =
      p.is_string() ? ctx.encode_prompt(p.get<std::string>()) : get_id_list(p, "prompt");
  ctx.check_prompt(ids, "prompt");
  return ids;
}

json chat_messages(const json& body) {
  if (!body.contains("messages")) bad_field("messages", "is required");
  try {
    return normalize_chat_messages(body["messages"]);
  } catch (const Error& e) {
    throw FieldError("messages", e.what());
  }
}

// A turn of the session named by "session_id": its new tokens and defaults (session_turn.h).
TurnPlan session_turn(ServingContext& ctx, ApiKind kind, const json& b,
                      const nlohmann::ordered_json& tools) {
  if (!b["session_id"].is_string() || b["session_id"].get_ref<const std::string&>().empty())
    bad_field("session_id", "must be a non-empty string");
  check_session_id(b["session_id"].get_ref<const std::string&>(), "session_id");
  const char* param = kind == ApiKind::kChat ? "messages" : "prompt";
  TurnInput in;
  if (kind == ApiKind::kChat) {
    in.kind = TurnInput::Kind::kChat;
    in.messages = chat_messages(b);
    in.tools = tools;
  } else if (const json p = one_prompt(b); p.is_string()) {
    in.text = p.get<std::string>();
  } else {
    in.kind = TurnInput::Kind::kTokens;
    in.ids = get_id_list(p, "prompt");
  }
  TurnPlan plan;
  try {
    plan = plan_session_turn(ctx, b["session_id"].get<std::string>(), in);
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) throw FieldError("session_id", e.what(), e.code());
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    throw FieldError(param, e.what());
  }
  ctx.check_prompt(plan.prompt, param);
  return plan;
}

bool same_policy(const CachePolicy& a, const CachePolicy& b) {
  return a.kind == b.kind && a.n_sink == b.n_sink && a.window == b.window;
}

std::vector<int32_t> chat_prompt(ServingContext& ctx, const json& body,
                                 const nlohmann::ordered_json& tools) {
  const json messages = chat_messages(body);
  std::string text;
  try {
    text = ctx.chat().render(messages, /*add_generation_prompt=*/true, tools);
  } catch (const Error& e) {
    throw FieldError("messages", e.what());
  }
  if (text.empty()) bad_field("messages", "render to an empty prompt");
  std::vector<int32_t> ids = ctx.encode_prompt(text, ctx.chat().has_special_tokens());
  ctx.check_prompt(ids, "messages");
  return ids;
}

// "stop": a string or a list of strings; the limits are gRPC's too (checked_stop_strings).
void parse_stop(const json& b, Request& r) {
  if (!has_field(b, "stop")) return;
  const json& v = b["stop"];
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else {
    if (!v.is_array()) bad_field("stop", "must be a string or a list of strings");
    for (const json& s : v) {
      if (!s.is_string()) bad_field("stop", "must be a string or a list of strings");
      stop.push_back(s.get<std::string>());
    }
  }
  r.stop = checked_stop_strings(stop);
}

// Log-probabilities: completions "logprobs": N; chat "logprobs": bool + "top_logprobs": N.
// Returns -1 (none) or the number of alternatives.
int parse_logprobs(ApiKind kind, const json& b) {
  if (kind == ApiKind::kCompletion)
    return has_field(b, "logprobs")
               ? static_cast<int>(get_int_field(b, "logprobs", 0, kMaxTopLogprobs))
               : -1;
  const bool on = has_field(b, "logprobs") && get_bool_field(b, "logprobs");
  const int top = has_field(b, "top_logprobs")
                      ? static_cast<int>(get_int_field(b, "top_logprobs", 0, kMaxTopLogprobs))
                      : 0;
  if (has_field(b, "top_logprobs") && !on) bad_field("top_logprobs", "needs \"logprobs\": true");
  return on ? top : -1;
}

// Prefix caching: "cache_salt" (as vLLM's: requests share cached KV blocks only with requests of
// the same salt) and "prefix_caching": false (the request neither reads nor leaves cached blocks).
void parse_prefix_cache_fields(const json& b, Request& r) {
  if (has_field(b, "cache_salt")) {
    if (!b["cache_salt"].is_string()) bad_field("cache_salt", "must be a string");
    r.cache_salt = b["cache_salt"].get<std::string>();
    if (r.cache_salt.empty()) bad_field("cache_salt", "must not be empty");
    if (r.cache_salt.size() > kMaxCacheSaltBytes)
      bad_field("cache_salt", "has more than " + std::to_string(kMaxCacheSaltBytes) + " bytes");
  }
  if (has_field(b, "prefix_caching")) r.prefix_caching = get_bool_field(b, "prefix_caching");
}

// A latency target (Rill extension, docs/api.md "Latency targets"): milliseconds, 0 for none;
// nullopt when absent (the server's default).
std::optional<std::chrono::milliseconds> latency_target(const json& b, const char* key) {
  if (!has_field(b, key)) return std::nullopt;
  return checked_latency_target(key, get_int_field(b, key, std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::max()));
}

// The final message's "slo": each target (ms; null: none) and whether it was met (null: not
// judged).
json slo_json(const SloOutcome& s) {
  auto target = [](double seconds) { return seconds > 0 ? json(seconds * 1e3) : json(nullptr); };
  auto met = [](const std::optional<bool>& m) { return m ? json(*m) : json(nullptr); };
  return {{"ttft_target_ms", target(s.ttft_target_s)},
          {"ttft_met", met(s.ttft_met)},
          {"tpot_target_ms", target(s.tpot_target_s)},
          {"tpot_met", met(s.tpot_met)}};
}

}  // namespace

ApiRequest parse_api_request(ServingContext& ctx, ApiKind kind, const std::string& body_text) {
  const json b = parse_json_object(body_text);
  ServingEngine& engine = ctx.require_engine();
  ApiRequest a;
  a.kind = kind;
  a.model = ctx.model().served_name;
  if (has_field(b, "model")) {
    if (!b["model"].is_string()) bad_field("model", "must be a string");
    if (b["model"].get<std::string>() != a.model)
      throw FieldError("model", "The model '" + b["model"].get<std::string>() + "' does not exist",
                       ErrorCode::kNotFound);
  }
  if (has_field(b, "n") && get_int_field(b, "n", 1, 1) != 1) bad_field("n", "must be 1");
  if (has_field(b, "best_of") && get_int_field(b, "best_of", 1, 1) != 1)
    bad_field("best_of", "must be 1");
  if (has_field(b, "echo") && get_bool_field(b, "echo")) bad_field("echo", "is not supported");
  if (has_field(b, "suffix")) bad_field("suffix", "is not supported");
  // Biased logits would change what is generated: refused rather than ignored (an empty map
  // biases nothing).
  if (has_field(b, "logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty()))
    bad_field("logit_bias", "is not supported");
  if (has_field(b, "stream")) a.stream = get_bool_field(b, "stream");
  if (has_field(b, "stream_options")) {
    const json& so = b["stream_options"];
    if (!so.is_object()) bad_field("stream_options", "must be an object");
    if (has_field(so, "include_usage")) a.include_usage = get_bool_field(so, "include_usage");
  }
  if (has_field(b, "return_token_ids")) a.return_token_ids = get_bool_field(b, "return_token_ids");
  Request& r = a.request;
  nlohmann::ordered_json tools_json = nullptr;  // what the template sees
  if (kind == ApiKind::kChat) {
    a.tools = parse_tool_fields(b, body_text);
    a.tool_family = ctx.model().tool_family;
    if (!a.tools.tools.empty()) tools_json = toolcall::tools_template_json(a.tools.tools);
  } else {
    for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"})
      if (has_field(b, key)) bad_field(key, "is only for /v1/chat/completions");
  }
  if (has_field(b, "session_id")) {
    // A session turn: the session's defaults stand for the fields the body leaves out.
    a.turn = session_turn(ctx, kind, b, tools_json);
    r = session_request(*a.turn);
  } else {
    r.prompt = kind == ApiKind::kChat ? chat_prompt(ctx, b, tools_json) : completion_prompt(ctx, b);
    r.sampling = ctx.model().sampling_defaults;  // the server's, then the model's, then OpenAI's
    r.max_tokens = 16;  // OpenAI's default for completions; chat: up to the context
    if (kind == ApiKind::kChat) r.max_tokens = 256;
  }
  r.id = ctx.new_request_id(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-");
  if (has_field(b, "max_tokens"))
    r.max_tokens = static_cast<int>(get_int_field(b, "max_tokens", 0, kMaxTokensLimit));
  if (has_field(b, "max_completion_tokens"))
    r.max_tokens = static_cast<int>(get_int_field(b, "max_completion_tokens", 0, kMaxTokensLimit));
  if (has_field(b, "min_tokens"))
    r.min_tokens = static_cast<int>(get_int_field(b, "min_tokens", 0, kMaxTokensLimit));
  parse_sampling_fields(b, r.sampling);
  parse_stop(b, r);
  if (has_field(b, "stop_token_ids")) {
    if (!b["stop_token_ids"].is_array())
      bad_field("stop_token_ids", "must be a list of integer token ids");
    r.stop_token_ids = get_id_list(b["stop_token_ids"], "stop_token_ids");
    check_stop_token_ids(r.stop_token_ids, engine.tokenizer().vocab_size());
  }
  if (has_field(b, "ignore_eos")) r.ignore_eos = get_bool_field(b, "ignore_eos");
  if (has_field(b, "skip_special_tokens"))
    r.skip_special_tokens = get_bool_field(b, "skip_special_tokens");
  else if (a.tools.active() && a.tool_family != toolcall::ToolFamily::kNone)
    r.skip_special_tokens = false;  // call markers are special tokens in some families (vLLM too)
  if (has_field(b, "priority"))
    r.priority = static_cast<int>(get_int_field(b, "priority", -1'000'000, 1'000'000));
  if (const auto cache = parse_cache_field(b)) {
    if (a.turn && !same_policy(*cache, r.cache))
      bad_field("cache", "must be the session's cache policy (" + r.cache.to_string() + ")");
    r.cache = *cache;
  }
  parse_prefix_cache_fields(b, r);
  if (const auto t = latency_target(b, "ttft_target_ms")) r.ttft_target = t;
  if (const auto t = latency_target(b, "tpot_target_ms")) r.tpot_target = t;
  a.top_logprobs = parse_logprobs(kind, b);
  r.logprobs = a.top_logprobs;
  // Structured output: the body's constraint field, or the call tool_choice forces (not both).
  std::optional<FieldConstraint> constraint = parse_constraint_fields(b, body_text);
  if (kind == ApiKind::kChat)
    if (auto call = tool_call_constraint(a.tool_family, a.tools, engine.tokenizer())) {
      if (constraint)
        throw FieldError(constraint->field, "at most one constraint per request: " + constraint->field +
                                                " and tool_choice '" +
                                                (a.tools.choice.mode == toolcall::ToolChoiceMode::kNamed
                                                     ? a.tools.choice.name
                                                     : std::string("required")) +
                                                "' were both given");
      constraint = std::move(call);
    }
  if (constraint) {
    check_field_constraint(engine, *constraint);
    r.constraint = std::move(constraint->constraint);
  }
  // A full cache holds prompt + generated tokens within the context (vLLM answers 400 too).
  const int context = ctx.model().context_length;
  if (!r.cache.is_streaming() && context > 0 &&
      static_cast<int64_t>(r.prompt.size()) + r.max_tokens > context) {
    if (has_field(b, "max_tokens") || has_field(b, "max_completion_tokens"))
      throw FieldError(has_field(b, "max_tokens") ? "max_tokens" : "max_completion_tokens",
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
      tok_(tok) {
  if (kind_ == ApiKind::kChat && req.tools.active() &&
      req.tool_family != toolcall::ToolFamily::kNone)
    parser_.emplace(req.tool_family, req.tools);
}

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

json ApiResponder::parsed_delta_json(const toolcall::ParsedDelta& d) {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.calls.empty()) delta["tool_calls"] = tool_call_deltas_json(d.calls);
  return delta;
}

std::string ApiResponder::chunk(const TokenChunk& c) {
  toolcall::ParsedDelta parsed;
  if (parser_) parser_->feed(c.text, parsed);
  if (!stream_) {
    text_ += c.text;
    message_.apply(parsed);
    ids_.insert(ids_.end(), c.ids.begin(), c.ids.end());
    logprobs_.insert(logprobs_.end(), c.logprobs.begin(), c.logprobs.end());
    return {};
  }
  const json lps = logprobs_json(c.ids, c.logprobs, text_.size());
  text_ += c.text;  // for completion text offsets
  // With tools, text the parser holds back (a possible call marker) waits for a later chunk.
  if (parser_ && parsed.empty() && lps.is_null() && !return_ids_) return {};
  json choice = {{"index", 0}, {"logprobs", lps}, {"finish_reason", nullptr}};
  if (parser_)
    choice["delta"] = parsed_delta_json(parsed);
  else if (kind_ == ApiKind::kChat)
    choice["delta"] = {{"content", c.text}};
  else
    choice["text"] = c.text;
  if (return_ids_) choice["token_ids"] = c.ids;
  json j = envelope(true);
  j["choices"] = json::array({choice});
  return sse(j);
}

// The non-streaming assistant message: content (null when the reply is only calls) and calls.
json ApiResponder::final_message() const {
  if (!parser_) return {{"role", "assistant"}, {"content", text_}};
  json m = {{"role", "assistant"}};
  m["content"] = message_.content.empty() && !message_.tool_calls.empty() ? json(nullptr)
                                                                          : json(message_.content);
  if (!message_.tool_calls.empty()) m["tool_calls"] = tool_calls_json(message_.tool_calls);
  return m;
}

std::string ApiResponder::final(const FinalEvent& f) {
  toolcall::ParsedDelta held;  // what the tool-call parser held back until the end
  if (parser_) parser_->finish(held);
  const char* reason = finish_reason_name(f.reason);
  if (tool_calls() > 0 && f.reason == FinishReason::kStop) reason = "tool_calls";
  const json usage = {{"prompt_tokens", f.usage.prompt_tokens},
                      {"completion_tokens", f.usage.completion_tokens},
                      {"total_tokens", f.usage.prompt_tokens + f.usage.completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", f.usage.cached_tokens}}},
                      {"evicted_tokens", f.usage.evicted_tokens}};
  if (stream_) {
    std::string out;
    if (!held.empty()) {
      json j = envelope(true);
      j["choices"] = json::array({{{"index", 0},
                                   {"delta", parsed_delta_json(held)},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
      out += sse(j);
    }
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", reason}};
    if (kind_ == ApiKind::kChat)
      choice["delta"] = json::object();
    else
      choice["text"] = "";
    if (return_ids_) choice["token_ids"] = json::array();
    json j = envelope(true);
    j["choices"] = json::array({choice});
    j["slo"] = slo_json(f.timings.slo);
    out += sse(j);
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
  message_.apply(held);
  if (kind_ == ApiKind::kChat)
    choice["message"] = final_message();
  else
    choice["text"] = text_;
  if (return_ids_) choice["token_ids"] = ids_;
  json j = envelope(false);
  j["choices"] = json::array({choice});
  j["usage"] = usage;
  j["slo"] = slo_json(f.timings.slo);
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
                      {"max_model_len", ctx.model().context_length},
                      {"quantization", ctx.model().quantization}};
  return dump_json({{"object", "list"}, {"data", json::array({model})}});
}

}  // namespace rill::server
