// Per-request latency targets (docs/scheduler.md, "Latency targets"): a time to first token
// (TTFT) and a time per output token (TPOT). A request names its own, or takes the server's
// default (SchedulerConfig::ttft_target / tpot_target), which is "auto" unless configured:
//   - auto TPOT: kAutoTpotFactor x the steady decode step, i.e. the step the step-cost model
//     predicts for the batch without any prefill (for judging a finished request: the mean of
//     that over the steps that decoded it);
//   - auto TTFT: kAutoTtftFactor x the request's unqueued TTFT, i.e. the time the planner would
//     need to feed its prompt beside the streams running when it arrived, had it no queue.
// A target of 0 means none (a batch request: it fills what targeted ones leave). Targets steer
// the planner (the tightest running stream's TPOT bounds each step's prefill; the TTFT target
// orders the queue and the prefill chunks), and each finished request is judged against them.
#pragma once

#include <chrono>
#include <optional>

#include "engine/finish_reason.h"
#include "engine/serving/request.h"

namespace rill {

/// A request's target once the server's default applies.
struct LatencyTarget {
  enum class Kind { kNone, kFixed, kAuto };
  Kind kind = Kind::kNone;
  double seconds = 0;  // kFixed only
  bool none() const { return kind == Kind::kNone; }
};

inline constexpr double kAutoTpotFactor = 2.0;  // auto TPOT target: this x the steady decode step
inline constexpr double kAutoTtftFactor = 2.0;  // auto TTFT target: this x the unqueued TTFT
/// The planner keeps a step within this share of the tightest target (room for the model's error).
inline constexpr double kStepHeadroom = 0.9;
/// The same for auto TPOT targets, which bound every step (the pace a streaming client sees token
/// by token, judged at its p99): on the H100 mixed steps planned at 0.9 ran up to 12% over their
/// prediction at p90 (the mix experiment, docs/performance.md T1).
inline constexpr double kAutoStepHeadroom = 0.85;
/// Largest target a request or the server may set.
inline constexpr std::chrono::milliseconds kMaxLatencyTarget{3'600'000};
/// Queue order of a request with no TTFT of its own nor a configured default (auto): as if its
/// target were this (all such requests keep their arrival order among themselves).
inline constexpr std::chrono::milliseconds kAutoOrderingTtft{1'000};

/// `requested` (the request's field: nullopt takes `server`, 0 is none) over the server's
/// default `server` (0: auto).
LatencyTarget resolve_target(std::optional<std::chrono::milliseconds> requested,
                             std::chrono::milliseconds server);

/// How much later than its arrival a request's place in the queue is computed from (waiting
/// order is effective priority from arrival + slack, then arrival): its fixed TTFT target,
/// kAutoOrderingTtft for auto, `queue_timeout` for none (batch requests go behind targeted ones
/// that arrived up to that much later).
std::chrono::milliseconds ordering_slack(const LatencyTarget& ttft,
                                         std::chrono::milliseconds queue_timeout);

/// The seconds a resolved target holds a request to: fixed, `auto_s` (as derived; 0 when not
/// known) for auto, 0 for none.
double target_seconds(const LatencyTarget& t, double auto_s);

/// Judges a finished request: `ttft_target_s` / `tpot_target_s` are the targets it was held to
/// (0: none); `first_token` whether it produced a token; `generated` its tokens. A request that
/// failed (kError) is not judged; one that reached its deadline without a token missed its TTFT
/// target; TPOT is judged with two tokens or more (cancelled streams included: the pace they got).
SloOutcome judge_slo(double ttft_target_s, double tpot_target_s, const RequestTimings& timings,
                     bool first_token, int generated, FinishReason reason);

}  // namespace rill
