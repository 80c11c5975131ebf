// Where idle sessions' caches live (loop thread). Every live session is in exactly one of four
// places: new (no cache yet: created, no turn admitted), active (a turn admitted), idle (cache
// in the KV pool) or offloaded (cache in host memory). Between turns a session keeps its runner
// sequence: in the KV pool while idle sessions hold at most session_gpu_fraction of it, else the
// least recently used are offloaded to the runner's host memory, and dropped (expired) when that
// is full too; a session idle past session_idle_ttl (from its last turn's end, or its creation
// when it has had none) expires wherever it is, new ones included. An admission that
// lacks blocks reclaims idle caches the same way, offloading sessions whose next turn is queued
// too. A session whose turn is queued is never dropped; one whose turn runs is never moved.
#pragma once

#include <vector>

#include "engine/finish_reason.h"
#include "engine/runner/runner.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/sequence.h"
#include "engine/serving/engine_metrics.h"
#include "engine/serving/session_table.h"

namespace rill {

class SessionKeeper {
 public:
  SessionKeeper(ModelRunner& runner, const SchedulerConfig& config, EngineMetrics& metrics,
                SessionTable& table);

  /// A turn was admitted: its session is active.
  void turn_started(const SessionPtr& s);
  /// A turn ended (the loop's finish, while `turn` is still this incarnation): its session keeps
  /// the runner sequence, with the turn's last sample as `pending` unless a step in flight feeds
  /// it; a closed session or a failed turn frees it.
  void turn_ended(Sequence& turn, FinishReason reason, Clock::time_point now);
  /// Each loop iteration: takes in new sessions, frees closed ones, expires idle ones past the
  /// TTL, keeps idle caches within the pool budget, records finished transfers and the gauges.
  void maintain(Clock::time_point now);
  /// Frees at least `blocks` pool blocks held by idle sessions (not `keep`, the one being
  /// admitted), least recently used first; true when it freed any.
  bool reclaim(int blocks, const SessionState* keep);
  /// Shutdown: frees every session's runner sequence.
  void clear();

 private:
  bool movable(const SessionPtr& s) const;  // idle: no turn queued or running
  // A session at its end (closed or expired): frees its runner sequence, leaves the lists and
  // lets go of its last turn once that has ended (`ending`: the turn ending now).
  void release(SessionPtr s, const Sequence* ending = nullptr);
  void drop(SessionPtr s, const char* reason, const std::string& why,
            const Sequence* ending = nullptr);
  bool offload(SessionPtr s);  // to host memory (dropping older offloaded ones for room)
  // Offloads (or drops) the least recently used idle resident session but `keep`; with
  // `queued_too` also one whose next turn is queued (offloaded only).
  bool evict_one(const SessionState* keep, bool queued_too);
  int idle_blocks() const;

  ModelRunner& runner_;
  const SchedulerConfig& config_;
  EngineMetrics& metrics_;
  SessionTable& table_;
  std::vector<SessionPtr> new_;     // no cache yet (no turn admitted), oldest first
  std::vector<SessionPtr> idle_;    // caches in the pool, least recently used first
  std::vector<SessionPtr> parked_;  // caches in host memory, least recently used first
  int active_ = 0;                  // sessions with an admitted turn
  Clock::time_point next_ttl_check_{};
  bool recheck_budget_ = false;  // a turn ended: idle sessions may hold more than the budget
};

}  // namespace rill
