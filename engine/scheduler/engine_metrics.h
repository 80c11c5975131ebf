// The serving engine's metrics: every name, help text, unit and bucket bound in one place
// (engine_metrics.cc; documented in docs/metrics.md). The engine records, the server renders.
#pragma once

#include <string>

#include "engine/finish_reason.h"
#include "engine/scheduler/metrics_registry.h"

namespace rill {

struct EngineMetrics {
  explicit EngineMetrics(MetricsRegistry& registry);

  // Per request (observed once, when it finishes or emits its first token).
  Histogram& time_to_first_token;    // seconds, arrival -> first token
  Histogram& time_per_output_token;  // seconds, mean over the request's tokens after the first
  Histogram& e2e_request_latency;    // seconds, arrival -> final event
  Histogram& request_queue_time;     // seconds, arrival -> first scheduled
  // Per token / per step.
  Histogram& inter_token_latency;    // seconds between a request's consecutive tokens
  Histogram& batch_size;             // sequences per step
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& kv_evicted_tokens;
  Counter& preemptions;
  Gauge& requests_running;
  Gauge& requests_waiting;
  Gauge& kv_cache_usage;             // ratio of KV blocks in use
  // Sessions (session.h).
  Gauge& sessions_active;            // a turn admitted (prefilling or decoding)
  Gauge& sessions_idle;              // between turns, cache in the KV pool
  Gauge& sessions_offloaded;         // between turns, cache in host memory
  Gauge& sessions_new;               // no turn admitted yet: no cache
  Counter& session_offloads;
  Counter& session_restores;
  Histogram& session_offload_time;   // seconds of device copy per offload
  Histogram& session_restore_time;   // likewise per restore

  Counter& requests_finished(FinishReason reason);
  /// reason: "queue_full", "invalid", "draining".
  Counter& requests_rejected(const std::string& reason);
  /// reason: "idle_ttl", "memory" (no room in the pool or host memory), "error".
  Counter& sessions_expired(const std::string& reason);

 private:
  MetricsRegistry& registry_;
};

}  // namespace rill
