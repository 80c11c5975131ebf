// What a client asks of the serving engine, and what it gets back: a stream of events (token
// chunks, then exactly one final event). No protocol types: the gRPC and HTTP front ends
// translate to and from these.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/error.h"
#include "engine/finish_reason.h"
#include "engine/grammar/constraint.h"
#include "engine/kv/cache_policy.h"
#include "engine/runner/sample_logprobs.h"
#include "engine/runner/sampling.h"

namespace rill {

using Clock = std::chrono::steady_clock;

/// `now + d`, saturating at the clock's last time point instead of wrapping past it (a wrapped
/// deadline lies in the past: the request would end "deadline" at once). d <= 0 is `now`.
inline Clock::time_point deadline_after(Clock::time_point now, std::chrono::milliseconds d) {
  if (d.count() <= 0) return now;
  const auto room =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return d >= room ? Clock::time_point::max() : now + d;
}

/// Structured output (docs/structured_outputs.md): what the generated tokens must spell.
struct OutputConstraint {
  grammar::ConstraintSpec spec;  // compiled at submit (ConstraintCache); errors refuse the request
  /// Token ids generated first, one per step, ahead of the grammar's text: a special token the
  /// format starts with (Mistral's [TOOL_CALLS]), which no grammar over text admits.
  std::vector<int32_t> forced_tokens;
};

struct Request {
  std::string id;  // client-visible; at most kMaxIdBytes (ids.h), unique within its scope
                   // among live requests (empty: assigned, "req-" + 32 random hex digits)
  /// Who may name `id` (ServingEngine::cancel). Empty: the id is unguessable (assigned by the
  /// engine or a front end), and holding it is the right to cancel. Otherwise the id is the
  /// client's own and only a caller in this scope (a front end's notion: the gRPC connection)
  /// finds it; two scopes may use the same id.
  std::string id_scope;
  std::vector<int32_t> prompt;  // token ids, BOS included where the model wants one
  SamplingParams sampling;
  CachePolicy cache;     // full, or streaming sinks + window
  int max_tokens = 256;  // generated tokens at most (>= 0)
  int min_tokens = 0;    // EOS / stop ids / stop strings are ignored before this many
  std::vector<int32_t> stop_token_ids;  // end generation (not streamed), besides the model's EOS
  std::vector<std::string> stop;        // stop strings, matched on the detokenized text; the
                                        // match and what follows are never streamed
  bool ignore_eos = false;              // the model's EOS does not end generation
  bool skip_special_tokens = true;      // detokenization
  int logprobs = -1;                    // -1 none; 0 the sampled token's; N <= 20 also top N
  int priority = 0;                     // lower runs first (vLLM's convention); FCFS within one
  std::optional<Clock::time_point> deadline;  // the whole request (queue + generation)
  std::optional<std::chrono::milliseconds>
      queue_timeout;  // longest wait to start (default: config)
  /// Prefix caching (SchedulerConfig::enable_prefix_caching): false keeps this request out of
  /// it, neither reading cached blocks nor leaving its own for others.
  bool prefix_caching = true;
  /// Requests share cached blocks only with requests of the same salt (a tenant's: a shared
  /// cache is a timing side channel between those who share it). At most kMaxCacheSaltBytes.
  std::string cache_salt;
  /// Latency targets (latency_targets.h): nullopt takes the server's default
  /// (SchedulerConfig::ttft_target / tpot_target), 0 is none; at most kMaxLatencyTarget.
  std::optional<std::chrono::milliseconds> ttft_target, tpot_target;
  /// A turn of this session (ServingEngine::create_session): `prompt` holds only the turn's new
  /// tokens, which the session's cache follows; its cache policy applies (`cache` is ignored).
  std::string session_id;
  /// With session_id: the session incarnation the turn was planned against (SessionInfo); a
  /// session that since took the id is refused (kNotFound). 0: whichever has the id.
  uint64_t session_incarnation = 0;
  /// Structured output: every sampled token is one the constraint allows, and the request ends
  /// ("stop") once the constraint is complete and allows nothing but EOS. Compiled at submit:
  /// an invalid or unsupported spec, one over GrammarLimits or past the compile time-out is
  /// refused with kInvalidArgument naming the problem. max_tokens mid-value ends with "length".
  std::optional<OutputConstraint> constraint;
};

/// Generated tokens as they are produced: several ids when the consumer fell behind.
struct TokenChunk {
  std::vector<int32_t> ids;
  std::string text;                      // their text; held back while it may start a stop string
  std::vector<SampleLogprobs> logprobs;  // one per id when the request asked for them
};

/// Longest Request::cache_salt accepted.
inline constexpr size_t kMaxCacheSaltBytes = 1024;

struct Usage {
  int prompt_tokens = 0;
  int cached_tokens = 0;       // prompt tokens whose KV came from the prefix cache
  int completion_tokens = 0;   // tokens streamed (a stop token or stop string not counted)
  int64_t evicted_tokens = 0;  // dropped from a streaming window during this request
  int preemptions = 0;         // times recomputed after losing its KV blocks
};

/// Whether a request met its latency targets (latency_targets.h, judge_slo).
struct SloOutcome {
  double ttft_target_s = 0;  // the targets it was held to (an auto one as derived); 0: none
  double tpot_target_s = 0;
  std::optional<bool> ttft_met;  // nullopt: no target, or nothing to judge (no token, an error)
  std::optional<bool> tpot_met;  // nullopt: no target, or fewer than two tokens
};

/// Seconds, measured by the engine from the request's arrival.
struct RequestTimings {
  double queue_s = 0;  // arrival -> first scheduled
  double ttft_s = 0;   // arrival -> first token (0 when none was generated)
  double tpot_s = 0;   // mean time per output token after the first
  double e2e_s = 0;    // arrival -> final event
  SloOutcome slo;      // against the request's targets
};

struct FinalEvent {
  FinishReason reason = FinishReason::kStop;
  std::string stop_string;            // the stop string that matched, if any
  std::optional<int32_t> stop_token;  // the EOS / stop id that ended it, if any
  Usage usage;
  RequestTimings timings;
  ErrorCode error_code = ErrorCode::kInternal;  // with kError (and a refusal after admission)
  std::string error_message;                    // with kError, kDeadline and kCancelled
};

using RequestEvent = std::variant<TokenChunk, FinalEvent>;

/// A refusal at submit() for lack of room (queue full): kResourceExhausted with a hint.
class OverloadedError : public Error {
 public:
  OverloadedError(const std::string& message, double retry_after_s)
      : Error(ErrorCode::kResourceExhausted, message), retry_after_s_(retry_after_s) {}
  /// Seconds after which a retry is likely to be admitted (from the current drain rate).
  double retry_after_s() const { return retry_after_s_; }

 private:
  double retry_after_s_;
};

}  // namespace rill
