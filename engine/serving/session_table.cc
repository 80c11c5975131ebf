#include "engine/serving/session_table.h"

#include <chrono>

#include "engine/scheduler/sequence.h"
#include "engine/serving/ids.h"

namespace rill {

namespace {
constexpr size_t kExpiredKept = 4096;  // expired ids remembered for their "expired" error
}  // namespace

const char* session_residence_name(SessionResidence r) {
  switch (r) {
    case SessionResidence::kNone:
      return "none";
    case SessionResidence::kGpu:
      return "gpu";
    case SessionResidence::kHost:
      return "host";
  }
  return "unknown";
}

const SessionPtr& SessionTable::live(const std::string& id) const {
  check_id_length(id, "session id");  // never a live id; keeps the messages below short
  auto it = live_.find(id);
  if (it != live_.end()) return it->second;
  auto ex = expired_.find(id);
  if (ex != expired_.end())
    throw Error(ErrorCode::kNotFound, "session " + id + " expired: " + ex->second);
  throw Error(ErrorCode::kNotFound, "session " + id + " not found");
}

bool turn_running(const SessionState& s) {
  return s.turn && !s.turn->finalized.load();
}

SessionPtr SessionTable::create(SessionOptions options, const KvGeometry& geometry,
                                Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (static_cast<int>(live_.size()) >= max_sessions_)
    throw Error(ErrorCode::kResourceExhausted,
                "too many sessions: " + std::to_string(live_.size()) + " live (limit " +
                    std::to_string(max_sessions_) +
                    "); close idle ones with DELETE /v1/sessions/{id}");
  if (options.id.empty()) {
    // 128 random bits: a collision with a live or remembered id is never expected; retried all
    // the same, since ids must be unique.
    do options.id = random_id("sess-");
    while (live_.count(options.id) || expired_.count(options.id));
  } else {
    check_id_length(options.id, "session id");
    if (live_.count(options.id))
      throw Error(ErrorCode::kInvalidArgument, "session id " + options.id + " is already in use");
  }
  auto s = std::make_shared<SessionState>();
  s->options = std::move(options);
  s->incarnation = ++last_incarnation_;
  s->geometry = geometry;
  s->last_active = now;
  expired_.erase(s->options.id);  // a reused id is live again
  live_.emplace(s->options.id, s);
  created_.push_back(s);
  return s;
}

SessionPtr SessionTable::begin_turn(const std::string& id, uint64_t incarnation,
                                    const std::shared_ptr<Sequence>& turn,
                                    std::shared_ptr<Sequence>& previous) {
  std::lock_guard lock(mu_);
  const SessionPtr& found = live(id);
  SessionState& s = *found;
  if (incarnation != 0 && s.incarnation != incarnation)
    throw Error(ErrorCode::kNotFound,
                "session " + id + " was closed (a new session has the same id)");
  if (turn_running(s))
    throw Error(
        ErrorCode::kFailedPrecondition,
        "session " + id +
            ": the previous turn is still running; send the next turn after its final message");
  previous = std::move(s.turn);
  s.turn = turn;
  return found;
}

void SessionTable::abandon_turn(const SessionPtr& s, const std::shared_ptr<Sequence>& turn,
                                const std::shared_ptr<Sequence>& previous) {
  std::lock_guard lock(mu_);
  if (s->turn == turn) s->turn = previous;
}

SessionInfo SessionTable::info(const std::string& id, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  const SessionState& s = *live(id);
  SessionInfo info;
  info.options = s.options;
  info.incarnation = s.incarnation;
  info.turns = s.turns;
  info.tokens_seen = s.tokens_seen;
  const KvGeometry& g = s.geometry;
  const int64_t cap = g.n_sink + static_cast<int64_t>(g.window);
  info.tokens_cached = std::min(s.tokens_seen, cap);
  info.tokens_evicted = s.tokens_seen - info.tokens_cached;
  info.turn_running = turn_running(s);
  info.residence = s.residence;
  info.idle_s = info.turn_running ? 0 : std::chrono::duration<double>(now - s.last_active).count();
  return info;
}

SessionTable::~SessionTable() {
  for (auto& [id, s] : live_) s->turn.reset();
  for (const SessionPtr& s : closed_) s->turn.reset();
}

SessionPtr SessionTable::close(const std::string& id, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return nullptr;
  if (incarnation != 0 && it->second->incarnation != incarnation) return nullptr;
  SessionPtr s = it->second;
  s->closed = true;
  live_.erase(it);
  closed_.push_back(s);
  return s;
}

void SessionTable::expire(const SessionPtr& s, const std::string& why) {
  std::lock_guard lock(mu_);
  s->closed = true;
  auto it = live_.find(s->options.id);
  if (it != live_.end() && it->second == s) {
    live_.erase(it);
    remember_expired(s->options.id, why);
  }
}

void SessionTable::remember_expired(const std::string& id, std::string why) {
  if (expired_.insert_or_assign(id, std::move(why)).second) expired_order_.push_back(id);
  while (expired_order_.size() > kExpiredKept) {
    expired_.erase(expired_order_.front());
    expired_order_.pop_front();
  }
}

SessionTable::Changes SessionTable::take_changes() {
  std::lock_guard lock(mu_);
  return {std::exchange(created_, {}), std::exchange(closed_, {})};
}

size_t SessionTable::size() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

}  // namespace rill
