// A session turn as both front ends run it: read the session from the engine, turn the client's
// input into the turn's new tokens (the first turn like a plain request, later ones without BOS,
// chat turns as a template delta), submit it, and afterwards keep what the next turn needs in
// that session's SessionEntry. Also the session lifecycle calls (create, get, delete) and the
// checks of the ids clients name.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/serving/request.h"
#include "engine/serving/request_handle.h"
#include "engine/serving/session.h"
#include "server/serving_context.h"
#include "server/session_entry.h"

namespace rill::server {

/// A turn's input as the client gave it.
struct TurnInput {
  enum class Kind { kText, kTokens, kChat };
  Kind kind = Kind::kText;
  std::string text;          // kText: appended as is
  std::vector<int32_t> ids;  // kTokens: used as given
  nlohmann::json messages;   // kChat: the new messages, normalized (normalize_chat_messages)
  nlohmann::ordered_json tools = nullptr;  // kChat: the turn's tools for the template, or null
};

/// What a turn feeds, and what to keep once it ends.
struct TurnPlan {
  std::string session_id;
  SessionInfo info;                     // the session when planned: incarnation, defaults, counters
  std::shared_ptr<SessionEntry> entry;  // that session's server state (null: none)
  std::vector<int32_t> prompt;          // the turn's new tokens
  TurnKind kind = TurnKind::kRaw;
  nlohmann::json history;       // chat: the history this turn extends
  std::string reply_end;        // chat: fed after the history's reply (SessionEntry)
  nlohmann::json new_messages;  // chat: the turn's messages
};

/// Checks a session id a client names (to create, look up, delete or take a turn in): over
/// kMaxIdBytes (ids.h) is kInvalidArgument naming the limit, a FieldError of `param` when given.
void check_session_id(const std::string& id, const char* param = nullptr);

/// Plans a turn of session `id` (with `incarnation`, SessionInfo's: only of that session, not a
/// later one with the same id). Throws kNotFound (unknown, expired, or closed and replaced),
/// kInvalidArgument for input of the other kind than the session's earlier turns, an empty
/// input or one the chat template rejects.
TurnPlan plan_session_turn(ServingContext& ctx, const std::string& id, const TurnInput& in,
                           uint64_t incarnation = 0);

/// `r` with the session's defaults (sampling, max_tokens, cache) for the caller to override
/// with what the client sent, the plan's prompt, session id and incarnation (so the engine
/// refuses the turn if another session took the id since it was planned).
Request session_request(const TurnPlan& plan);

/// Submits a turn to the engine.
RequestHandle submit_session_turn(ServingContext& ctx, Request r, EventNotifier notify);

/// Records how a turn ended in the entry of the session it was planned against: a turn that
/// was not refused fixes the session's kind, and a chat turn keeps its reply in the history.
void finish_session_turn(ServingContext& ctx, const TurnPlan& plan, const FinalEvent& f,
                         const std::string& reply);

/// Creates a session in the engine with a fresh SessionEntry; an id over kMaxIdBytes or with
/// other characters than letters, digits, '-', '_' and '.' is kInvalidArgument (FieldError "id").
SessionInfo create_session(ServingContext& ctx, SessionOptions options);

/// The engine's view of a session (check_session_id, then kNotFound when unknown or expired).
SessionInfo get_session(ServingContext& ctx, const std::string& id);

/// Closes a session (cancelling its running turn); false when unknown or, with `incarnation`,
/// when the session that has the id now is a later one.
bool delete_session(ServingContext& ctx, const std::string& id, uint64_t incarnation = 0);

}  // namespace rill::server
