// What the HTTP front end answers, apart from how the bytes move: a request's method and path
// matched against the routes, and every non-generation route answered here (models, tokenize,
// detokenize, health, metrics, sessions). Generation routes stream, so the connection
// (http_server.cc) runs them; this says which. Errors come back mapped (error_mapping.h).
#pragma once

#include <string>
#include <string_view>

#include <boost/beast/http/verb.hpp>

#include "engine/serving/metrics_registry.h"
#include "server/error_mapping.h"
#include "server/openai_api.h"
#include "server/serving_context.h"

namespace rill::server {

struct RouteResult {
  enum class Kind {
    kAnswer,    // send `status`, `content_type`, `body`
    kError,     // send `error` (`status` 0: its mapped status; 404, 405 otherwise)
    kGenerate,  // a generation of `api`: the connection runs it
  };
  Kind kind = Kind::kAnswer;
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  ErrorReply error;
  ApiKind api = ApiKind::kCompletion;
};

/// Routes one request. `target` is the path without its query. Never throws.
RouteResult route_request(ServingContext& ctx, const MetricsRegistry& metrics,
                          boost::beast::http::verb method, std::string_view method_name,
                          const std::string& target, const std::string& body);

/// The Allow header of a 405 for `target` (the path without its query).
std::string allowed_methods(const std::string& target);

}  // namespace rill::server
