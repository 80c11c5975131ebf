#include "engine/serving/engine_metrics.h"

#include <vector>

namespace rill {

namespace {

// Per-token latencies resolve 1 ms (a 7B decode step on an H100 is under 5 ms).
const std::vector<double> kTokenBuckets = {0.001, 0.002, 0.003, 0.004,  0.005, 0.006,  0.007,
                                           0.008, 0.009, 0.01,  0.0125, 0.015, 0.0175, 0.02,
                                           0.025, 0.03,  0.04,  0.05,   0.075, 0.1,    0.15,
                                           0.2,   0.3,   0.5,   0.75,   1.0,   2.5,    5.0};
const std::vector<double> kTtftBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06,
                                          0.08,  0.1,    0.15,  0.25, 0.5,  0.75, 1.0,
                                          2.5,   5.0,    7.5,   10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBuckets = {0.01,  0.025, 0.05,  0.1,   0.25,  0.5,  1.0,
                                             2.5,   5.0,   10.0,  15.0,  20.0,  30.0, 60.0,
                                             120.0, 240.0, 480.0, 960.0, 1920.0};
const std::vector<double> kQueueBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                           1.0,   2.5,   5.0,  10.0,  20.0, 40.0, 80.0};
// Copies of a session's cache over PCIe: ~0.1 ms for a small cache to ~100 ms for a 7B one of
// several thousand tokens.
const std::vector<double> kTransferBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                              0.025,  0.05,    0.1,    0.25,  0.5,    1.0};
// Host time of one constrained sequence's grammar mask: 1 us (a cached table) to 50 ms (a
// string's end over a 128k vocabulary).
const std::vector<double> kMaskBuckets = {0.000001, 0.000005, 0.00001, 0.000025, 0.00005,
                                          0.0001,   0.00025,  0.0005,  0.001,    0.0025,
                                          0.005,    0.01,     0.05};
const std::vector<double> kBatchBuckets = {1,  2,  4,   8,   16,  24,  32, 48,
                                           64, 96, 128, 192, 256, 384, 512};

}  // namespace

EngineMetrics::EngineMetrics(MetricsRegistry& r)
    : time_to_first_token(r.histogram("rill_time_to_first_token_seconds",
                                      "Time from a request's arrival to its first generated token.",
                                      kTtftBuckets)),
      time_per_output_token(r.histogram(
          "rill_time_per_output_token_seconds",
          "Mean time per output token of a request, after its first token.", kTokenBuckets)),
      e2e_request_latency(r.histogram("rill_e2e_request_latency_seconds",
                                      "Time from a request's arrival to its final event.",
                                      kRequestBuckets)),
      request_queue_time(r.histogram("rill_request_queue_time_seconds",
                                     "Time from a request's arrival until it is first scheduled.",
                                     kQueueBuckets)),
      inter_token_latency(r.histogram("rill_inter_token_latency_seconds",
                                      "Time between consecutive tokens of a request.",
                                      kTokenBuckets)),
      batch_size(r.histogram("rill_batch_size", "Sequences in one engine step.", kBatchBuckets)),
      grammar_mask_time(r.histogram(
          "rill_grammar_mask_seconds",
          "Host time of one constrained sequence's next-token mask (structured outputs).",
          kMaskBuckets)),
      prompt_tokens(r.counter("rill_prompt_tokens_total", "Prompt tokens of admitted requests.")),
      generation_tokens(
          r.counter("rill_generation_tokens_total", "Tokens generated and streamed.")),
      kv_evicted_tokens(
          r.counter("rill_kv_evicted_tokens_total",
                    "Tokens dropped from StreamingLLM windows (sinks + window caches).")),
      preemptions(
          r.counter("rill_preemptions_total",
                    "Sequences preempted for KV blocks (recomputed later, outputs unchanged).")),
      requests_running(
          r.gauge("rill_requests_running", "Requests admitted to the engine (prefill or decode).")),
      requests_waiting(r.gauge("rill_requests_waiting", "Requests queued, new or preempted.")),
      kv_cache_usage(r.gauge("rill_kv_cache_usage_ratio", "Fraction of KV-cache blocks in use.")),
      prefix_cache_queries(r.counter("rill_prefix_cache_queries_total",
                                     "Prompt tokens looked up in the prefix cache at admission.")),
      prefix_cache_hits(
          r.counter("rill_prefix_cache_hits_total",
                    "Prompt tokens whose KV blocks the prefix cache held at admission.")),
      prefix_cache_blocks(
          r.gauge("rill_prefix_cache_blocks",
                  "KV blocks the prefix cache keeps for reuse that no request holds (evictable).")),
      prefix_cache_evictions(r.counter("rill_prefix_cache_evictions_total",
                                       "Cached KV blocks evicted (reused for other contents).")),
      sessions_active(r.gauge("rill_sessions", "Live sessions, by state.", {{"state", "active"}})),
      sessions_idle(r.gauge("rill_sessions", "Live sessions, by state.", {{"state", "idle"}})),
      sessions_offloaded(
          r.gauge("rill_sessions", "Live sessions, by state.", {{"state", "offloaded"}})),
      sessions_new(r.gauge("rill_sessions", "Live sessions, by state.", {{"state", "new"}})),
      session_offloads(r.counter("rill_session_offloads_total",
                                 "Idle session caches copied from the KV pool to host memory.")),
      session_restores(r.counter("rill_session_restores_total",
                                 "Offloaded session caches copied back into the KV pool.")),
      session_offload_time(r.histogram("rill_session_offload_seconds",
                                       "Device time of one session cache's copy to host memory.",
                                       kTransferBuckets)),
      session_restore_time(r.histogram(
          "rill_session_restore_seconds",
          "Device time of one session cache's copy back to the KV pool.", kTransferBuckets)),
      slo_ttft_met(r.counter("rill_slo_met_total",
                             "Finished requests that met their latency target, by target kind.",
                             {{"kind", "ttft"}})),
      slo_ttft_missed(
          r.counter("rill_slo_missed_total",
                    "Finished requests that missed their latency target, by target kind.",
                    {{"kind", "ttft"}})),
      slo_tpot_met(r.counter("rill_slo_met_total",
                             "Finished requests that met their latency target, by target kind.",
                             {{"kind", "tpot"}})),
      slo_tpot_missed(
          r.counter("rill_slo_missed_total",
                    "Finished requests that missed their latency target, by target kind.",
                    {{"kind", "tpot"}})),
      registry_(r) {
  // Every finish reason and rejection reason exists from the start, at 0.
  for (FinishReason f : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled,
                         FinishReason::kDeadline, FinishReason::kError})
    requests_finished(f);
  for (const char* reason : {"queue_full", "invalid", "draining"}) requests_rejected(reason);
  for (const char* reason : {"idle_ttl", "memory", "error"}) sessions_expired(reason);
}

Counter& EngineMetrics::sessions_expired(const std::string& reason) {
  return registry_.counter(
      "rill_sessions_expired_total",
      "Sessions dropped by the server (their next turn gets \"session expired\"), by reason.",
      {{"reason", reason}});
}

void EngineMetrics::record_slo(const SloOutcome& slo) {
  if (slo.ttft_met) (*slo.ttft_met ? slo_ttft_met : slo_ttft_missed).add();
  if (slo.tpot_met) (*slo.tpot_met ? slo_tpot_met : slo_tpot_missed).add();
}

Counter& EngineMetrics::requests_finished(FinishReason reason) {
  return registry_.counter("rill_requests_total", "Requests finished, by finish reason.",
                           {{"finished_reason", finish_reason_name(reason)}});
}

Counter& EngineMetrics::requests_rejected(const std::string& reason) {
  return registry_.counter("rill_requests_rejected_total",
                           "Requests refused at submission, by reason.", {{"reason", reason}});
}

}  // namespace rill
