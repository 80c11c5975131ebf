// The live sessions by id, shared by the API threads (create, turns, info, close) and the loop
// thread (turn ends, offload, expiry). Expired sessions leave a bounded record of why, so a
// later turn is told "expired" rather than "not found". An id names whichever session holds it
// now; callers that must reach one particular session (a front end's call that created it, a
// turn planned against it) also give its incarnation, which no later session shares.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/serving/session_state.h"

namespace rill {

class SessionTable {
 public:
  explicit SessionTable(int max_sessions) : max_sessions_(max_sessions) {}
  /// Lets the sessions left go of their last turns (which hold their sessions: see
  /// SessionKeeper::release), so both are freed. The loop has stopped.
  ~SessionTable();
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  /// Registers a session (its id assigned when empty) as a new incarnation, idle from `now`.
  /// kInvalidArgument for an id in use or over kMaxIdBytes, kResourceExhausted at max_sessions.
  SessionPtr create(SessionOptions options, const KvGeometry& geometry, Clock::time_point now);
  /// The session a new turn belongs to, with `turn` recorded as its latest: kNotFound for an
  /// unknown or expired session (the message says which) or, with `incarnation` (0: any), one
  /// that was closed while a new session took its id; kFailedPrecondition while the previous
  /// turn's final event is not out. `previous`: the turn it replaces (for abandon_turn).
  SessionPtr begin_turn(const std::string& id, uint64_t incarnation,
                        const std::shared_ptr<Sequence>& turn, std::shared_ptr<Sequence>& previous);
  /// Undoes begin_turn for a turn that was refused before reaching the engine.
  void abandon_turn(const SessionPtr& s, const std::shared_ptr<Sequence>& turn,
                    const std::shared_ptr<Sequence>& previous);
  SessionInfo info(const std::string& id, Clock::time_point now) const;
  /// Removes a session the client closed and returns it (the loop frees its cache); nullptr when
  /// no live session has the id, or (with `incarnation`, 0: any) the one that has it is another.
  SessionPtr close(const std::string& id, uint64_t incarnation = 0);
  /// Removes a session the engine dropped; later turns get "session <id> expired: <why>".
  void expire(const SessionPtr& s, const std::string& why);
  /// Sessions created since the last call (the keeper counts them and expires them by the idle
  /// TTL even when no turn ever comes) and sessions closed by clients since the last call, taken
  /// together (loop thread): a session created and closed in between is in both, so the keeper
  /// adopts it and frees it in one pass. (Taken one list at a time, a session created and closed
  /// between the two takes was freed first and adopted after, closed: counted "new" forever.)
  struct Changes {
    std::vector<SessionPtr> created, closed;
  };
  Changes take_changes();

  std::mutex& mutex() const { return mu_; }
  size_t size() const;

 private:
  void remember_expired(const std::string& id, std::string why);  // mu_ held
  // The live session `id` (mu_ held); kNotFound, saying "expired" and why where it was dropped.
  const SessionPtr& live(const std::string& id) const;

  const int max_sessions_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, SessionPtr> live_;
  std::vector<SessionPtr> created_, closed_;
  std::unordered_map<std::string, std::string> expired_;  // id -> why (the newest kExpiredKept)
  std::deque<std::string> expired_order_;
  uint64_t last_incarnation_ = 0;
};

/// True while a turn's final event is not out (SessionState::turn). Takes no lock: the caller
/// holds SessionTable's mutex.
bool turn_running(const SessionState& s);

}  // namespace rill
