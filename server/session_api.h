// The JSON of the HTTP session endpoints (POST /v1/sessions, GET and DELETE
// /v1/sessions/{id}), without any HTTP: the create body -> SessionOptions, SessionInfo -> the
// session object. http_server.cc routes; session_turn.h keeps the store in step.
#pragma once

#include <cstdint>
#include <string>

#include "engine/serving/session.h"
#include "server/serving_context.h"

namespace rill::server {

/// Parses a POST /v1/sessions body: "id", "cache" (the completions' shape), the completions'
/// sampling fields and "max_tokens" as the turns' defaults. Throws FieldError / rill::Error
/// (kInvalidArgument; kNotFound for an unknown "model"). The engine checks the policy.
SessionOptions parse_session_options(const ServingContext& ctx, const std::string& body);

/// {"id", "object": "session", "created", "cache", "turns", "tokens_seen", "tokens_evicted",
/// "tokens_cached", "turn_running", "residence", "idle_s", "defaults"}; "created" from the
/// session's SessionEntry.
std::string session_body(const SessionInfo& info);

/// {"id", "object": "session", "deleted": true}.
std::string session_deleted_body(const std::string& id);

}  // namespace rill::server
