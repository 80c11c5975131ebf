// The engine's state of one session (session.h): what the API threads read and the loop thread
// keeps. The shared part is guarded by SessionTable's mutex; the loop-owned part is touched by
// the loop thread alone.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/kv/cache_policy.h"
#include "engine/kv/kv_cache_manager.h"
#include "engine/serving/request.h"
#include "engine/serving/session.h"

namespace rill {

struct Sequence;

struct SessionState {
  // Immutable after creation.
  SessionOptions options;    // id assigned
  uint64_t incarnation = 0;  // unique among all sessions created (SessionInfo::incarnation)
  KvGeometry geometry;

  // Shared: guarded by SessionTable's mutex.
  std::shared_ptr<Sequence> turn;  // the latest turn: running until its final event is out
  bool closed = false;             // closed by the client or expired; the loop frees its cache
  int64_t turns = 0;
  int64_t tokens_seen = 0;  // its stream length after the last finished turn
  SessionResidence residence = SessionResidence::kNone;
  Clock::time_point last_active;  // the end of its last turn (its creation before): the idle TTL
                                  // counts from here

  // Loop-owned.
  SeqId runner_id = -1;            // its runner sequence, kept between turns (-1: none yet)
  bool offloaded = false;          // its blocks are in the runner's host memory
  bool in_runner = false;          // a turn of it is admitted (running): its cache stays put
  std::optional<int32_t> pending;  // the last turn's final sample, not yet fed: the next turn's
                                   // first input
  int steps_in_flight = 0;         // launched, unfinished steps with its runner sequence
  int64_t stream_len = 0;          // tokens fed to its cache (after the launched steps)
};

using SessionPtr = std::shared_ptr<SessionState>;

}  // namespace rill
