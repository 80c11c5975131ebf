// The server's own state per session, beside the engine's: when it was created, which kind of
// turns it takes, and what the next chat turn's delta needs (chat_turn_delta in chat_prompt.h).
// The engine owns the session itself (its cache, counters and lifetime); entries here follow
// it: added at create, dropped at delete and whenever the engine reports the session gone.
// Memory per session is constant: the chat history kept is trimmed to the system message and
// the last exchange.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace rill::server {

/// What a session's turns are: fixed by its first turn, so that chat history and raw text never
/// interleave in one cache.
enum class TurnKind { kAny, kChat, kRaw };

struct SessionEntry {
  int64_t created = 0;  // unix seconds
  TurnKind kind = TurnKind::kAny;
  nlohmann::json history = nlohmann::json::array();  // chat: [system], last user, reply
  std::string reply_end;  // chat: the stop token's / stop string's text fed after the reply
};

/// Thread-safe map from session id to SessionEntry; both front ends share one.
class SessionStore {
 public:
  /// Records a session created now (replaces a stale entry with the same id).
  void add(const std::string& id);
  /// The entry, or nullopt when the server holds none (a session it did not see created).
  std::optional<SessionEntry> get(const std::string& id) const;
  /// Replaces the entry's kind and chat state after a turn; no-op when the id is gone (deleted
  /// while the turn ran).
  void update(const std::string& id, TurnKind kind, nlohmann::json history, std::string reply_end);
  void forget(const std::string& id);
  size_t size() const;
  std::vector<std::string> ids() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, SessionEntry> entries_;
};

}  // namespace rill::server
