// Sessions: multi-turn conversations that keep their StreamingLLM cache (sink blocks + window
// ring) in the runner between turns, so each turn prefills only its new tokens however long the
// conversation has run. What a client creates and reads back; the loop-side state is
// SessionState (session_state.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/kv/cache_policy.h"
#include "engine/runner/sampling.h"

namespace rill {

/// What a front end keeps per session beside the engine (the server's chat history and turn
/// kind). It lives and dies with the session it was created with (closed, expired or dropped),
/// so a turn's end updates its own session's state and never that of a later session with the
/// same id. The engine never reads it.
struct SessionAttachment {
  virtual ~SessionAttachment() = default;
};

struct SessionOptions {
  std::string id;           // empty: assigned ("sess-" + 32 random hex digits); unique among live
                            // sessions; at most kMaxIdBytes (ids.h)
  CachePolicy cache;        // must be streaming (sinks + window): the session's memory is constant
  SamplingParams sampling;  // defaults for its turns: stored for the front ends, which apply them
  int max_tokens = 256;     // likewise
  std::shared_ptr<SessionAttachment> attachment;  // the front end's state (may be null)
};

enum class SessionResidence {
  kNone,  // no turn has run yet: nothing cached
  kGpu,   // its cache blocks are in the runner's pool
  kHost,  // offloaded to host memory (restored by its next turn)
};

struct SessionInfo {
  SessionOptions options;      // id filled in
  uint64_t incarnation = 0;    // this session among all created: a new session with the id of
                               // a closed one is another incarnation (never 0)
  int64_t turns = 0;           // turns finished (any finish reason)
  int64_t tokens_seen = 0;     // every token fed to its cache so far (the stream length)
  int64_t tokens_evicted = 0;  // of those, dropped from the window
  int64_t tokens_cached = 0;   // in the cache now: sinks + window part
  bool turn_running = false;   // a turn is queued or generating
  SessionResidence residence = SessionResidence::kNone;
  double idle_s = 0;  // since its last turn ended, or creation (0 during a turn)
};

const char* session_residence_name(SessionResidence r);

}  // namespace rill
