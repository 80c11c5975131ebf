// The serving engine's metrics: every name, help text, unit and bucket bound in one place
// (engine_metrics.cc; documented in docs/metrics.md). The engine records, the server renders.
#pragma once

#include <string>

#include "engine/finish_reason.h"
#include "engine/serving/metrics_registry.h"
#include "engine/serving/request.h"

namespace rill {

struct EngineMetrics {
  explicit EngineMetrics(MetricsRegistry& registry);

  // Per request (observed once, when it finishes or emits its first token).
  Histogram& time_to_first_token;    // seconds, arrival -> first token
  Histogram& time_per_output_token;  // seconds, mean over the request's tokens after the first
  Histogram& e2e_request_latency;    // seconds, arrival -> final event
  Histogram& request_queue_time;     // seconds, arrival -> first scheduled
  // Per token / per step.
  Histogram& inter_token_latency;  // seconds between a request's consecutive tokens
  Histogram& batch_size;           // sequences per step
  Histogram& grammar_mask_time;    // seconds of host work per constrained token
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& kv_evicted_tokens;
  Counter& preemptions;
  Gauge& requests_running;
  Gauge& requests_waiting;
  Gauge& kv_cache_usage;  // ratio of KV blocks in use
  // Prefix caching (docs/scheduler.md), in tokens as vLLM counts them.
  Counter& prefix_cache_queries;    // prompt tokens looked up at admission
  Counter& prefix_cache_hits;       // of those, tokens whose blocks were cached
  Gauge& prefix_cache_blocks;       // blocks cached for reuse that no request holds
  Counter& prefix_cache_evictions;  // cached blocks reused for other contents
  // Sessions (session.h).
  Gauge& sessions_active;     // a turn admitted (prefilling or decoding)
  Gauge& sessions_idle;       // between turns, cache in the KV pool
  Gauge& sessions_offloaded;  // between turns, cache in host memory
  Gauge& sessions_new;        // no turn admitted yet: no cache
  Counter& session_offloads;
  Counter& session_restores;
  Histogram& session_offload_time;  // seconds of device copy per offload
  Histogram& session_restore_time;  // likewise per restore
  // Latency targets (latency_targets.h): finished requests judged against each kind of target.
  Counter& slo_ttft_met;
  Counter& slo_ttft_missed;
  Counter& slo_tpot_met;
  Counter& slo_tpot_missed;

  Counter& requests_finished(FinishReason reason);
  /// Counts a judged request (slo_*: a target it met or missed; nothing for one not judged).
  void record_slo(const SloOutcome& slo);
  /// reason: "queue_full", "invalid", "draining".
  Counter& requests_rejected(const std::string& reason);
  /// reason: "idle_ttl", "memory" (no room in the pool or host memory), "error".
  Counter& sessions_expired(const std::string& reason);

 private:
  MetricsRegistry& registry_;
};

}  // namespace rill
