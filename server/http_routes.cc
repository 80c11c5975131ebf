#include "server/http_routes.h"

#include <cstring>
#include <vector>

#include "server/json_body.h"
#include "server/metrics_exposition.h"
#include "server/session_api.h"

namespace rill::server {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;

struct Route {
  const char* path;
  http::verb method;
};
constexpr Route kRoutes[] = {
    {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
    {"/v1/models", http::verb::get},       {"/tokenize", http::verb::post},
    {"/detokenize", http::verb::post},     {"/health", http::verb::get},
    {"/metrics", http::verb::get},
};
// POST /v1/sessions; GET and DELETE /v1/sessions/{id} (routed apart: the path has a parameter).
constexpr const char* kSessions = "/v1/sessions";
constexpr const char* kSessionPrefix = "/v1/sessions/";

bool is_session_path(const std::string& target) {
  return target == kSessions || target.rfind(kSessionPrefix, 0) == 0;
}

RouteResult answer(int status, std::string body, const char* content_type = "application/json") {
  RouteResult r;
  r.status = status;
  r.content_type = content_type;
  r.body = std::move(body);
  return r;
}

RouteResult error(ErrorReply e, int status = 0) {
  RouteResult r;
  r.kind = RouteResult::Kind::kError;
  r.error = std::move(e);
  r.status = status;
  return r;
}

RouteResult not_found(const std::string& target) {
  return error(map_error(ErrorCode::kNotFound, "no route for " + target), 404);
}

RouteResult not_allowed(std::string_view method_name, const std::string& target) {
  ErrorReply e = map_error(ErrorCode::kInvalidArgument,
                           "method " + std::string(method_name) + " is not allowed on " + target);
  e.type = "invalid_request_error";
  return error(std::move(e), 405);
}

RouteResult health(const ServingContext& ctx) {
  const std::string why = ctx.unhealthy_reason();
  if (why.empty()) return answer(200, R"({"status":"ok"})");
  return answer(503, dump_json({{"status", why}}));
}

// vLLM's shapes: {"prompt": text, "add_special_tokens": bool} -> {"tokens", "count",
// "max_model_len"}.
RouteResult tokenize(ServingContext& ctx, const std::string& body) {
  const json b = parse_json_object(body);
  const Tokenizer& tok = ctx.require_engine().tokenizer();
  const char* key = b.contains("prompt") ? "prompt" : "text";
  if (!b.contains(key) || !b[key].is_string())
    throw FieldError("prompt", "'prompt' must be a string");
  bool add_special = true;
  if (b.contains("add_special_tokens")) {
    if (!b["add_special_tokens"].is_boolean())
      throw FieldError("add_special_tokens", "'add_special_tokens' must be a boolean");
    add_special = b["add_special_tokens"].get<bool>();
  }
  const std::vector<int32_t> ids = tok.encode(b[key].get<std::string>(), add_special);
  return answer(200, dump_json({{"tokens", ids},
                                {"count", ids.size()},
                                {"max_model_len", ctx.model().context_length}}));
}

// {"tokens": [ids]} -> {"prompt": text}.
RouteResult detokenize(ServingContext& ctx, const std::string& body) {
  const json b = parse_json_object(body);
  const Tokenizer& tok = ctx.require_engine().tokenizer();
  if (!b.contains("tokens") || !b["tokens"].is_array())
    throw FieldError("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const json& x : b["tokens"]) {
    if (!x.is_number_integer()) throw FieldError("tokens", "'tokens' must be a list of token ids");
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= tok.vocab_size())
      throw FieldError("tokens", "'tokens' has token id " + std::to_string(id) +
                                     " out of range [0, " + std::to_string(tok.vocab_size()) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return answer(200, dump_json({{"prompt", tok.decode(ids)}}));
}

// POST /v1/sessions -> 201; GET /v1/sessions/{id} -> 200; DELETE /v1/sessions/{id} -> 200.
RouteResult route_session(ServingContext& ctx, http::verb m, std::string_view method_name,
                          const std::string& target, const std::string& body) {
  const bool collection = target == kSessions;
  const std::string id = collection ? std::string() : target.substr(std::strlen(kSessionPrefix));
  if (!collection && (id.empty() || id.find('/') != std::string::npos)) return not_found(target);
  const bool allowed =
      collection ? m == http::verb::post
                 : (m == http::verb::get || m == http::verb::head || m == http::verb::delete_);
  if (!allowed) return not_allowed(method_name, target);
  if (collection) {
    const SessionInfo info = create_session(ctx, parse_session_options(ctx, body));
    return answer(201, session_body(info));
  }
  if (m == http::verb::delete_) {
    if (!delete_session(ctx, id)) throw Error(ErrorCode::kNotFound, "session " + id + " not found");
    return answer(200, session_deleted_body(id));
  }
  return answer(200, session_body(get_session(ctx, id)));
}

RouteResult route_plain(ServingContext& ctx, const MetricsRegistry& metrics, http::verb method,
                        std::string_view method_name, const std::string& target,
                        const std::string& body) {
  if (is_session_path(target)) return route_session(ctx, method, method_name, target, body);
  const Route* found = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes) {
    if (target != r.path) continue;
    path_known = true;
    if (method == r.method || (r.method == http::verb::get && method == http::verb::head))
      found = &r;
  }
  if (!path_known) return not_found(target);
  if (!found) return not_allowed(method_name, target);
  RouteResult r;
  if (target == "/v1/completions" || target == "/v1/chat/completions") {
    r.kind = RouteResult::Kind::kGenerate;
    r.api = target == "/v1/completions" ? ApiKind::kCompletion : ApiKind::kChat;
    return r;
  }
  if (target == "/health") return health(ctx);
  if (target == "/metrics")
    return answer(200, render_prometheus(metrics.snapshot()), kPrometheusContentType);
  if (target == "/v1/models") {
    ctx.require_engine();
    return answer(200, models_body(ctx));
  }
  if (target == "/tokenize") return tokenize(ctx, body);
  return detokenize(ctx, body);
}

}  // namespace

RouteResult route_request(ServingContext& ctx, const MetricsRegistry& metrics, http::verb method,
                          std::string_view method_name, const std::string& target,
                          const std::string& body) {
  try {
    return route_plain(ctx, metrics, method, method_name, target, body);
  } catch (const std::exception& e) {
    return error(map_exception(e));
  }
}

std::string allowed_methods(const std::string& target) {
  if (target == kSessions) return "POST";
  if (is_session_path(target)) return "GET, HEAD, DELETE";
  for (const Route& r : kRoutes)
    if (target == r.path) return r.method == http::verb::get ? "GET, HEAD" : "POST";
  return {};
}

}  // namespace rill::server
