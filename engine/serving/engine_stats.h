// A snapshot of the serving engine's state: what a health check and a load balancer read.
#pragma once

#include <cstdint>

namespace rill {

struct EngineStats {
  int running = 0;  // sequences admitted (prefilling or decoding)
  int waiting = 0;  // requests queued (new, or preempted for recompute)
  int64_t waiting_prompt_tokens = 0;
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;
  int kv_blocks_free = 0;            // neither used nor cached
  int kv_blocks_cached = 0;          // prefix cache: kept for reuse, evictable
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache, in total
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached
  double prefix_cache_hit_rate = 0;  // hits / queries (0 before any query)
  double kv_usage = 0;               // used / total
  int64_t evicted_tokens = 0;        // total, from streaming windows
  int64_t preemptions = 0;           // total
  int64_t steps = 0;                 // total steps run
  double device_busy_s = 0;  // summed device time of the steps, where the runner measures it
  double steps_per_s = 0;    // over the last few seconds
  double generation_tokens_per_s = 0;
  double finished_per_s = 0;       // requests finished per second, over the last few seconds
  bool step_cost_trusted = false;  // the step-cost model is past its warm-up (step_cost_model.h)
  int64_t ttft_overrides = 0;      // steps fed at the full budget for a TTFT at stake, in total
  int64_t overloaded_steps = 0;    // steps planned while an explicit TTFT target was missed
  double seconds_since_last_step = 0;
  bool stalled = false;   // work pending and no step for SchedulerConfig::stall_timeout
  bool draining = false;  // drain() called: no new requests
};

}  // namespace rill
