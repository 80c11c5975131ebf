// A session turn as both front ends run it: read the session from the engine, turn the client's
// input into the turn's new tokens (the first turn like a plain request, later ones without BOS,
// chat turns as a template delta), submit it, and afterwards keep what the next turn needs.
// Also the session lifecycle calls that keep SessionStore in step with the engine.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler/request.h"
#include "engine/scheduler/request_handle.h"
#include "engine/scheduler/session.h"
#include "server/serving_context.h"

namespace rill::server {

/// A turn's input as the client gave it.
struct TurnInput {
  enum class Kind { kText, kTokens, kChat };
  Kind kind = Kind::kText;
  std::string text;          // kText: appended as is
  std::vector<int32_t> ids;  // kTokens: used as given
  nlohmann::json messages;   // kChat: the new messages, normalized (normalize_chat_messages)
};

/// What a turn feeds, and what to keep once it ends.
struct TurnPlan {
  std::string session_id;
  SessionInfo info;             // the session when planned: its defaults and counters
  std::vector<int32_t> prompt;  // the turn's new tokens
  TurnKind kind = TurnKind::kRaw;
  nlohmann::json history;       // chat: the history this turn extends
  std::string reply_end;        // chat: fed after the history's reply (SessionEntry)
  nlohmann::json new_messages;  // chat: the turn's messages
};

/// Plans a turn of session `id`. Throws kNotFound (unknown or expired: the store forgets it),
/// kInvalidArgument for input of the other kind than the session's earlier turns, an empty
/// input or one the chat template rejects.
TurnPlan plan_session_turn(ServingContext& ctx, const std::string& id, const TurnInput& in);

/// `r` with the session's defaults (sampling, max_tokens, cache) for the caller to override
/// with what the client sent, the plan's prompt and session id.
Request session_request(const TurnPlan& plan);

/// Submits a turn; a kNotFound refusal (the session expired meanwhile) forgets the session.
RequestHandle submit_session_turn(ServingContext& ctx, Request r, EventNotifier notify);

/// Records how a turn ended: a chat turn that was not refused keeps its reply in the history.
void finish_session_turn(ServingContext& ctx, const TurnPlan& plan, const FinalEvent& f,
                         const std::string& reply);

/// Creates a session in the engine and its store entry; an id with other characters than
/// letters, digits, '-', '_' and '.' is kInvalidArgument (FieldError "id"). Entries of sessions the
/// engine dropped on its own (expired, never touched again) are swept here once the store outgrows
/// the engine's max_sessions, so the store stays bounded.
SessionInfo create_session(ServingContext& ctx, SessionOptions options);

/// The engine's view of a session; kNotFound forgets it.
SessionInfo get_session(ServingContext& ctx, const std::string& id);

/// Closes a session (cancelling its running turn) and forgets it; false when unknown.
bool delete_session(ServingContext& ctx, const std::string& id);

}  // namespace rill::server
