// The server's own state per session, beside the engine's: when it was created, which kind of
// turns it takes, and what the next chat turn's delta needs (chat_turn_delta in chat_prompt.h).
// It rides on the engine's session as its attachment (SessionOptions::attachment), so it lives
// and dies with that session: a turn keeps a pointer to the entry of the session it was planned
// against, and its end updates that entry only, never one of a later session with the same id.
// Memory per session is constant: the chat history kept is trimmed to the system message and
// the last exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/serving/session.h"

namespace rill::server {

/// What a session's turns are: fixed by its first turn, so that chat history and raw text never
/// interleave in one cache.
enum class TurnKind { kAny, kChat, kRaw };

/// What the next turn needs of the turns before it.
struct TurnHistory {
  TurnKind kind = TurnKind::kAny;
  nlohmann::json history = nlohmann::json::array();  // chat: [system], last user, reply
  std::string reply_end;  // chat: the stop token's / stop string's text fed after the reply
};

/// One session's server state; shared by the turns that run on it (one at a time) and the
/// readers of its session object, hence the lock.
class SessionEntry final : public SessionAttachment {
 public:
  /// A session created now.
  SessionEntry();
  int64_t created() const { return created_; }  // unix seconds
  TurnHistory history() const;
  void set_history(TurnHistory h);

 private:
  const int64_t created_;
  mutable std::mutex mu_;
  TurnHistory history_;
};

/// The server's entry of the session `info` describes; nullptr for a session created through
/// the engine's API without one (tools, tests).
std::shared_ptr<SessionEntry> session_entry(const SessionInfo& info);

}  // namespace rill::server
