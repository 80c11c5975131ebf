#include "engine/serving/request_validation.h"

#include <string>

#include "engine/error.h"
#include "engine/scheduler/latency_targets.h"

namespace rill {

namespace {

[[noreturn]] void bad(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

bool valid_duration(std::chrono::milliseconds d) {
  return d.count() > 0 && d <= kMaxSchedulerDuration;
}

void validate_cache(const CachePolicy& cache, int64_t prompt, const KvCacheManager& kv,
                    int kv_blocks_total, const SchedulerConfig& c) {
  if (cache.is_streaming()) {
    if (cache.n_sink > c.max_sink)
      bad("cache n_sink " + std::to_string(cache.n_sink) + " exceeds the server limit " +
          std::to_string(c.max_sink));
    if (cache.window > c.max_window)
      bad("cache window " + std::to_string(cache.window) + " exceeds the server limit " +
          std::to_string(c.max_window));
    kv.geometry_for(cache);  // n_sink >= 0, window > 0, n_sink + window within the context
    const int need = kv.blocks_needed_max(cache, prompt, int64_t{1} << 40);
    if (need > kv_blocks_total)
      bad("streaming cache of " + std::to_string(cache.n_sink) + " + " +
          std::to_string(cache.window) + " tokens needs " + std::to_string(need) +
          " KV blocks; the pool has " + std::to_string(kv_blocks_total));
    return;
  }
  if (prompt > kv.max_context())
    bad("prompt of " + std::to_string(prompt) + " tokens exceeds the model's context of " +
        std::to_string(kv.max_context()) +
        " tokens (cache policy full; a streaming cache has no such limit)");
  const int need = kv.blocks_needed_now(cache, std::min<int64_t>(prompt + 1, kv.max_context()));
  if (need > kv_blocks_total)
    bad("prompt of " + std::to_string(prompt) + " tokens needs " + std::to_string(need) +
        " KV blocks; the pool has " + std::to_string(kv_blocks_total));
}

void validate_target(const char* name, std::optional<std::chrono::milliseconds> t) {
  if (t && (t->count() < 0 || *t > kMaxLatencyTarget))
    bad(std::string(name) + " must be in [0, " + std::to_string(kMaxLatencyTarget.count()) +
        "] ms (got " + std::to_string(t->count()) + ")");
}

}  // namespace

void validate_request(const Request& r, const ModelConfig& model, const KvCacheManager& kv,
                      int kv_blocks_total, const SchedulerConfig& config) {
  if (r.prompt.empty()) bad("prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= model.vocab_size)
      bad("prompt token id " + std::to_string(r.prompt[i]) + " at position " + std::to_string(i) +
          " is out of range [0, " + std::to_string(model.vocab_size) + ")");
  r.sampling.validate();
  if (r.max_tokens < 0) bad("max_tokens must be >= 0 (got " + std::to_string(r.max_tokens) + ")");
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    bad("min_tokens must be in [0, max_tokens] (got " + std::to_string(r.min_tokens) + ")");
  if (r.logprobs < -1 || r.logprobs > kMaxTopLogprobs)
    bad("logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "] (got " +
        std::to_string(r.logprobs) + ")");
  for (int32_t id : r.stop_token_ids)
    if (id < 0 || id >= model.vocab_size)
      bad("stop token id " + std::to_string(id) + " is out of range [0, " +
          std::to_string(model.vocab_size) + ")");
  if (r.queue_timeout && !valid_duration(*r.queue_timeout))
    bad("queue_timeout must be in [1 ms, 30 days] (got " +
        std::to_string(r.queue_timeout->count()) + " ms)");
  if (r.stop.size() > kMaxStopStrings)
    bad("at most " + std::to_string(kMaxStopStrings) + " stop strings");
  for (const std::string& s : r.stop)
    if (s.empty() || s.size() > kMaxStopStringBytes)
      bad("stop strings must have 1 to " + std::to_string(kMaxStopStringBytes) + " bytes");
  if (r.cache_salt.size() > kMaxCacheSaltBytes)
    bad("cache_salt has " + std::to_string(r.cache_salt.size()) + " bytes, more than the limit " +
        std::to_string(kMaxCacheSaltBytes));
  validate_target("ttft_target", r.ttft_target);
  validate_target("tpot_target", r.tpot_target);
  validate_cache(r.cache, static_cast<int64_t>(r.prompt.size()), kv, kv_blocks_total, config);
}

void validate_session_options(const SessionOptions& o, const KvCacheManager& kv,
                              int kv_blocks_total, const SchedulerConfig& config) {
  if (!o.cache.is_streaming())
    bad("sessions need the streaming cache policy (attention sinks + window): a session's memory "
        "is constant, "
        "got " +
        o.cache.to_string());
  validate_cache(o.cache, 0, kv, kv_blocks_total, config);
  o.sampling.validate();
  if (o.max_tokens < 0) bad("max_tokens must be >= 0 (got " + std::to_string(o.max_tokens) + ")");
}

void validate_scheduler_config(const SchedulerConfig& c) {
  auto need = [](bool ok, const char* what) {
    if (!ok) bad(std::string("scheduler: ") + what);
  };
  need(c.max_num_seqs > 0, "max_num_seqs must be > 0");
  need(c.max_num_batched_tokens > 0, "max_num_batched_tokens must be > 0");
  // 0 would refuse every request as "overloaded": a queue must hold at least one.
  need(c.max_queued_requests > 0, "max_queued_requests must be > 0");
  need(c.max_queued_prompt_tokens > 0, "max_queued_prompt_tokens must be > 0");
  need(valid_duration(c.queue_timeout), "queue_timeout must be in [1 ms, 30 days]");
  need(valid_duration(c.stall_timeout), "stall_timeout must be in [1 ms, 30 days]");
  need(c.max_buffered_chunks > 0, "max_buffered_chunks must be > 0");
  need(c.max_sink >= 0, "max_sink must be >= 0");
  need(c.max_window > 0, "max_window must be > 0");
  need(c.aging_per_s >= 0, "aging_per_s must be >= 0");
  need(c.policy == "priority" || c.policy == "fcfs", "policy must be priority or fcfs");
  need(c.kv_watermark >= 0 && c.kv_watermark < 1, "kv_watermark must be in [0, 1)");
  need(c.max_sessions >= 0, "max_sessions must be >= 0");
  need(c.session_gpu_fraction >= 0 && c.session_gpu_fraction <= 1,
       "session_gpu_fraction must be in [0, 1]");
  need(valid_duration(c.session_idle_ttl), "session_idle_ttl must be in [1 ms, 30 days]");
  need(c.max_restores_per_step > 0, "max_restores_per_step must be > 0");
  need(c.ttft_target.count() >= 0 && c.ttft_target <= kMaxLatencyTarget,
       "ttft_target must be in [0, 3600000] ms");
  need(c.tpot_target.count() >= 0 && c.tpot_target <= kMaxLatencyTarget,
       "tpot_target must be in [0, 3600000] ms");
  need(c.min_prefill_tokens > 0, "min_prefill_tokens must be > 0");
  need(c.warmup_prefill_tokens > 0, "warmup_prefill_tokens must be > 0");
}

}  // namespace rill
