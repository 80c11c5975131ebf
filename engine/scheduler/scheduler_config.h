// Limits and policies of the serving engine. Defaults follow vLLM's where it has one; the
// front ends fill this from their configuration file and flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rill {

/// The longest duration a scheduler setting (queue timeout, stall timeout, session idle TTL) or
/// a request's queue timeout may have: 30 days. Deadlines are steady-clock time points in
/// nanoseconds, `now + duration`, and the clock's range ends about 292 years after boot: 9.3e12
/// ms would wrap it (every request "deadline" at once); 30 days keeps far from that.
inline constexpr std::chrono::milliseconds kMaxSchedulerDuration{30LL * 24 * 3600 * 1000};

struct SchedulerConfig {
  std::vector<int32_t> eos_token_ids;  // the model's end-of-sequence ids (Model::stop_token_ids());
                                       // empty: the tokenizer's EOS
  int max_num_seqs = 256;             // sequences in one step (decode + prefill)
  int max_num_batched_tokens = 8192;  // tokens in one step: decode tokens plus prefill chunks
                                      // (with tpot_aware, an upper bound on what the model allows)
  /// TPOT-aware prefill (docs/scheduler.md, "Sizing prefill"): each step takes as many prompt
  /// tokens as the step-cost model says fit within the tightest running stream's TPOT target.
  /// false: every step fills max_num_batched_tokens (chunked prefill with a fixed budget).
  bool tpot_aware = true;
  /// Default latency targets of requests that set none (latency_targets.h); 0: auto (derived
  /// from the measured steps). A request's own 0 means no target.
  std::chrono::milliseconds ttft_target{0};
  std::chrono::milliseconds tpot_target{0};
  /// Prompt tokens a step feeds at least when some wait, whatever the targets (an unreachable
  /// target slows prefill, never stops it), and per step while the cost model warms up.
  int min_prefill_tokens = 64;
  int warmup_prefill_tokens = 256;
  int max_queued_requests = 1024;     // waiting requests beyond which submit() refuses (>= 1)
  int64_t max_queued_prompt_tokens = 1 << 20;       // prompt tokens waiting, likewise (>= 1)
  std::chrono::milliseconds queue_timeout{60'000};  // default longest wait to be scheduled
  std::chrono::milliseconds stall_timeout{10'000};  // work pending, no step for this long: stalled
  int max_buffered_chunks = 4096;     // token chunks a consumer may leave untaken before the
                                      // request is cancelled as a slow reader
  int max_sink = 64;                  // streaming policy limits a request may ask for
  int max_window = 1 << 20;
  /// Priority aging: a waiting request's effective priority is
  ///   priority - aging_per_s * seconds_waited
  /// (lower runs first), so a low-priority request waits at most
  ///   (priority - best_priority) / aging_per_s seconds behind later high-priority arrivals.
  double aging_per_s = 1.0;
  /// Scheduling policy (scheduling_policy.h): "priority" (priority with aging, as above) or
  /// "fcfs" (arrival order, priorities ignored).
  std::string policy = "priority";
  /// KV blocks kept free for running `full` sequences to grow into before new ones are admitted
  /// (a fraction of the pool), so admission does not immediately force preemption.
  double kv_watermark = 0.01;
  /// Automatic prefix caching (docs/scheduler.md): requests start from the cached KV blocks of
  /// the longest prefix they share with earlier ones, and leave theirs for later ones.
  bool enable_prefix_caching = true;
  // Sessions (session.h). Idle sessions keep their cache in the KV pool up to
  // session_gpu_fraction of it; beyond, the least recently used are offloaded to the runner's
  // host memory (ModelRunner::host_kv_blocks) while it has room, and dropped (expired) past it.
  // A session idle for longer than session_idle_ttl expires wherever its cache is.
  int max_sessions = 1024;
  double session_gpu_fraction = 0.5;
  std::chrono::milliseconds session_idle_ttl{30 * 60'000};
  int max_restores_per_step = 1;      // offloaded caches copied back to the pool per step
};

/// Defaults for a runner ("cuda" or "cpu"): on the GPU vLLM's (256 sequences, 8192 tokens per
/// step); on the CPU, where a step's time grows with its tokens, 64 sequences and 512 tokens so
/// a prefill chunk keeps running streams' inter-token latency bounded. Prefix caching is on by
/// default on both (docs/scheduler.md, "Prefix caching": its GPU tests pass on the H100, and
/// random prompts run within 1% of the cache off).
inline SchedulerConfig scheduler_defaults(std::string_view runner) {
  SchedulerConfig c;
  if (runner == "cpu") {
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = 512;
  }
  return c;
}

}  // namespace rill
