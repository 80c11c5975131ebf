#include "engine/serving/session_keeper.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <spdlog/spdlog.h>

namespace rill {

namespace {

constexpr auto kTtlCheckInterval = std::chrono::milliseconds(100);

void erase(std::vector<SessionPtr>& v, const SessionPtr& s) {
  std::erase(v, s);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::string s =
      std::to_string(ms.count() / 1000) + "." + std::to_string(1000 + ms.count() % 1000).substr(1);
  while (s.back() == '0') s.pop_back();  // 0.200 -> 0.2, 1800.000 -> 1800.
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

SessionKeeper::SessionKeeper(ModelRunner& runner, const SchedulerConfig& config,
                             EngineMetrics& metrics, SessionTable& table)
    : runner_(runner), config_(config), metrics_(metrics), table_(table) {}

bool SessionKeeper::movable(const SessionPtr& s) const {
  std::lock_guard lock(table_.mutex());
  return !turn_running(*s) && !s->closed;
}

void SessionKeeper::turn_started(const SessionPtr& s) {
  erase(new_, s);
  erase(idle_, s);
  if (std::erase(parked_, s) > 0) metrics_.session_restores.add();  // the planner restored it
  ++active_;
  std::lock_guard lock(table_.mutex());
  s->residence = SessionResidence::kGpu;
}

void SessionKeeper::turn_ended(Sequence& turn, FinishReason reason, Clock::time_point now) {
  const SessionPtr& s = turn.session;
  recheck_budget_ = true;
  if (turn.runner_id < 0) {  // never admitted: the session is as it was, idle from now
    {
      std::lock_guard lock(table_.mutex());
      s->last_active = now;
    }
    if (s->closed) {
      release(s, &turn);
    } else if (!s->offloaded && s->runner_id >= 0 && std::erase(parked_, s) > 0) {
      idle_.push_back(s);  // its cache was restored ahead of the turn: back in the pool
      std::lock_guard lock(table_.mutex());
      s->residence = SessionResidence::kGpu;
    }
    return;
  }
  --active_;
  s->in_runner = false;
  // The turn's last sample is in the cache already when a launched step feeds it (that step's
  // own sample is dropped); otherwise the next turn feeds it first.
  s->pending = turn.samples_in_flight == 0 ? turn.last_sample : std::nullopt;
  s->stream_len = runner_.kv().sequence(s->runner_id).num_tokens;
  {
    std::lock_guard lock(table_.mutex());
    ++s->turns;
    s->tokens_seen = s->stream_len;
    s->last_active = now;
  }
  if (reason == FinishReason::kError) {
    drop(s, "error", "its turn " + turn.request.id + " failed", &turn);
  } else if (s->closed) {
    release(s, &turn);
  } else {
    idle_.push_back(s);
  }
}

// By value: `s` may be an element of the lists.
void SessionKeeper::release(SessionPtr s, const Sequence* ending) {
  erase(new_, s);
  erase(idle_, s);
  erase(parked_, s);
  if (s->runner_id >= 0) runner_.remove_sequence(s->runner_id);
  s->runner_id = -1;
  s->offloaded = false;
  s->in_runner = false;
  s->pending.reset();
  std::lock_guard lock(table_.mutex());
  s->residence = SessionResidence::kNone;
  // The last turn holds its session (Sequence::session) as the session holds it: kept, the two
  // would never be freed. No turn follows a released session; one still queued stays, so that
  // close_session can cancel it, and is let go when it ends (`ending`).
  if (s->turn && (s->turn.get() == ending || s->turn->phase == SeqPhase::kFinished))
    s->turn.reset();
}

void SessionKeeper::drop(SessionPtr s, const char* reason, const std::string& why,
                         const Sequence* ending) {
  spdlog::info("session {} expired: {}", s->options.id, why);
  release(s, ending);
  table_.expire(s, why);
  metrics_.sessions_expired(reason).add();
}

bool SessionKeeper::offload(SessionPtr s) {
  const int need = runner_.kv().blocks_held(s->runner_id);
  // Host memory full: older offloaded sessions make room before this one is given up.
  while (runner_.host_kv_blocks_free() < need && !parked_.empty() &&
         parked_.front()->last_active <= s->last_active && !parked_.front()->in_runner &&
         movable(parked_.front()))
    drop(parked_.front(), "memory",
         "host memory for idle sessions is full (least recently used dropped)");
  if (runner_.host_kv_blocks_free() < need) return false;
  runner_.offload_sequence(s->runner_id);
  s->offloaded = true;
  erase(idle_, s);
  parked_.push_back(s);
  metrics_.session_offloads.add();
  std::lock_guard lock(table_.mutex());
  s->residence = SessionResidence::kHost;
  return true;
}

bool SessionKeeper::evict_one(const SessionState* keep, bool queued_too) {
  for (const SessionPtr& candidate : idle_) {
    const SessionPtr s = candidate;  // a copy: offload() and drop() erase it from idle_
    if (s.get() == keep || s->in_runner) continue;
    const bool idle = movable(s);  // no turn queued
    if (!idle && !queued_too) continue;
    if (offload(s)) return true;
    if (!idle) continue;  // a queued turn needs its cache: never dropped
    drop(s, "memory",
         "no room for idle sessions in the KV pool or host memory (least recently used dropped)");
    return true;
  }
  return false;
}

int SessionKeeper::idle_blocks() const {
  int blocks = 0;
  for (const SessionPtr& s : idle_) blocks += runner_.kv().blocks_held(s->runner_id);
  return blocks;
}

// Offloads still copying (ModelRunner::releasing_blocks) free their blocks soon: they count
// toward `blocks`, so a step that waits for them offloads no more sessions; true only when
// blocks are free now (the planner retries the admission).
bool SessionKeeper::reclaim(int blocks, const SessionState* keep) {
  const KvCacheManager& kv = runner_.kv();
  const int free_before = kv.num_free_blocks();
  const int coming_before = free_before + runner_.releasing_blocks();
  const int want = blocks - runner_.releasing_blocks();
  while (kv.num_free_blocks() + runner_.releasing_blocks() - coming_before < want &&
         evict_one(keep, true)) {
  }
  return kv.num_free_blocks() > free_before;
}

void SessionKeeper::maintain(Clock::time_point now) {
  // Created before closed: a session closed right after its creation is adopted, then freed.
  SessionTable::Changes changes = table_.take_changes();
  for (SessionPtr& s : changes.created) new_.push_back(std::move(s));
  for (const SessionPtr& s : changes.closed) {
    bool turn_live = false;
    {
      std::lock_guard lock(table_.mutex());
      turn_live = s->turn && s->turn->phase != SeqPhase::kFinished && s->turn->runner_id >= 0;
    }
    if (!turn_live) release(s);  // else turn_ended frees it
  }
  if (now >= next_ttl_check_) {
    next_ttl_check_ = now + kTtlCheckInterval;
    std::vector<SessionPtr> stale;
    for (const auto* list : {&new_, &idle_, &parked_})
      for (const SessionPtr& s : *list)
        if (now - s->last_active > config_.session_idle_ttl && movable(s)) stale.push_back(s);
    for (const SessionPtr& s : stale)
      drop(s, "idle_ttl", "idle for more than " + seconds_text(config_.session_idle_ttl) + " s");
  }
  if (recheck_budget_) {  // idle sessions' blocks only grow when a turn ends
    const int budget =
        static_cast<int>(std::floor(config_.session_gpu_fraction * runner_.kv().num_blocks()));
    while (!idle_.empty() && idle_blocks() > budget && evict_one(nullptr, false)) {
    }
    // Still over: the sessions left are not movable yet (a final event not out, a turn queued).
    recheck_budget_ = !idle_.empty() && idle_blocks() > budget;
  }
  for (const KvTransfer& t : runner_.completed_transfers())
    (t.restore ? metrics_.session_restore_time : metrics_.session_offload_time).observe(t.seconds);
  metrics_.sessions_new.set(static_cast<double>(new_.size()));
  metrics_.sessions_active.set(active_);
  metrics_.sessions_idle.set(static_cast<double>(idle_.size()));
  metrics_.sessions_offloaded.set(static_cast<double>(parked_.size()));
}

void SessionKeeper::clear() {
  new_.clear();  // nothing to free: no runner sequence yet
  for (const auto* list : {&idle_, &parked_}) {
    const std::vector<SessionPtr> copy = *list;
    for (const SessionPtr& s : copy) release(s);
  }
}

}  // namespace rill
