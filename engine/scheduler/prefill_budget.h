// How many prompt tokens one step may carry (docs/scheduler.md, "Sizing prefill"). The planner
// first gives every decoding stream its token, then asks a PrefillBudget for each prefill chunk:
// as many tokens as keep the step's predicted time (step_cost_model.h) within the tightest TPOT
// target of the streams in it, so everything the target leaves goes to prefill and TTFT is as
// short as the target allows. max_num_batched_tokens stays an upper bound. Pure functions of the
// model and the step: no engine state.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kv/cache_policy.h"
#include "engine/scheduler/latency_targets.h"
#include "engine/scheduler/step_cost_model.h"

namespace rill {

/// Keys the attention of `n` tokens appended at stream position `start` reads, summed over the
/// tokens, in a cache of geometry `g` (a query at position i reads min(i + 1, n_sink + window)
/// keys, or i + 1 without a window).
int64_t attended_keys(const KvGeometry& g, int64_t start, int64_t n);

/// The TPOT target of one stream decoding in a step, and its progress (for an explicit target,
/// held as a mean over the request, as it is judged).
struct StreamPace {
  StreamPace(LatencyTarget t = {}) : tpot(t) {}  // NOLINT: a target alone bounds every step
  LatencyTarget tpot;  // kAuto: seconds is the stream's auto target once measured, while no
                       // request waits (else 0)
  double elapsed_s = -1;   // since its first token, steps in flight counted; < 0: per step only
  int64_t intervals = 0;   // its inter-token intervals so far (tokens - 1), in flight counted
  int64_t remaining = 1;   // tokens it may still generate, up to kPaceHorizon
  int64_t left = 0;        // tokens it may still generate, uncapped (0: unknown)
};

/// Tokens ahead a stream's mean TPOT is projected over (pace_allowance_s): the borrowing from
/// its future steps a long step may do. Enough for a fresh stream at half its target to absorb
/// an 8,192-token prompt on the 7B shape (about 500 ms); a stream that then ends sooner (at an
/// EOS) than the horizon may miss its target.
inline constexpr int64_t kPaceHorizon = 64;

/// The longest step a stream with an explicit TPOT target `p` can take now and keep its mean
/// within kStepHeadroom x the target, if its next remaining - 1 steps take `steady_s`:
///   (elapsed + d + (remaining - 1) steady) / (intervals + remaining) <= headroom x target
/// (>= 0). A stream behind its target gets less than a step: the step takes only the planner's
/// least prefill (min_tokens), and the stream catches up. A stream that can no longer meet its
/// target, even were its `left` remaining steps all steady:
///   (elapsed + left steady) / (intervals + left) > target
/// constrains nothing (infinity): it misses its target whatever this step takes, and holding
/// prompts back for it would only make them miss theirs (in an overloaded server, the steps of
/// least prefill it asked for took a quarter of the prompt tokens a full step does per second).
/// Without progress known (elapsed_s < 0): headroom x target, per step.
double pace_allowance_s(const StreamPace& p, double steady_s);

/// What bounds one step's prefill.
struct StepLimits {
  bool constrained = false;  // some decoding stream in the step has a TPOT target
  bool warming_up = false;   // constrained, but the model is not trusted: warmup_tokens apply
  double target_s = 0;       // constrained with a trusted model: the step time to stay within
  int token_cap = 0;         // tokens left under max_num_batched_tokens after the decodes
  int min_tokens = 0;        // the step's first chunk gets at least this much (when it wants it)
  int warmup_tokens = 0;     // constrained, model not trusted yet (or no target known): per step
  /// ModelRunner::prefill_token_granularity: a chunk that fits the target is topped up so that
  /// the step's tokens reach the next multiple of it (those tokens cost nothing).
  int granularity = 1;
};

/// The steady decode step: the model's time for a decode-only step of `rows` rows, each reading
/// as many keys as the mean row of `decodes` (0 when `decodes` has no row).
double steady_step_s(const StepCostModel& model, const StepComposition& decodes, int rows);

/// The limits of a step whose decoding streams have TPOT targets `paces`, once the model is
/// `trusted` (before that, the warm-up allowance): the least of the streams' allowances, where
/// an explicit target is a mean over the request (pace_allowance_s: a stream that ran faster
/// than its target can absorb a longer step) and an auto one bounds every step at
/// kAutoStepHeadroom x kAutoTpotFactor x `steady_s` (the pace a streaming client sees token by
/// token), or x the stream's own auto target (StreamPace::tpot.seconds, kAutoTpotFactor x the
/// steady step it decoded in) where that is known and smaller. Streams without a target (batch) do not constrain, nor do auto targets while
/// `steady_s` is 0 (no decode step measured yet, so no target exists: the step fills
/// `token_cap`, which also lets a burst of prompts reach the decode-only steps the model needs).
/// `token_cap`, `min_tokens`, `warmup_tokens` are copied. `spread` (the model's
/// prefill_spread, >= 1) narrows the auto bound: kAutoTpotFactor x `steady_s` / spread when that
/// is below the headroom's, so that the slow steps of a composition stay within the target too.
StepLimits step_limits(std::span<const StreamPace> paces, double steady_s, bool trusted,
                       int token_cap, int min_tokens, int warmup_tokens, double spread = 1.0);

/// Hands out one step's prefill tokens, chunk by chunk.
class PrefillBudget {
 public:
  /// `decodes`: the step's decode rows, already placed. `model` must outlive the budget.
  PrefillBudget(const StepCostModel& model, const StepComposition& decodes,
                const StepLimits& limits);

  /// The most tokens (<= `want`) a chunk of a sequence with cache geometry `g` and `start`
  /// tokens in its stream may feed in this step: within the cap, and within the target when the
  /// model is trusted (at least limits.min_tokens for the step's first chunk), or the warm-up
  /// allowance when it is not. Does not change the budget.
  int64_t fit(int64_t want, const KvGeometry& g, int64_t start) const;
  /// Records a chunk of `n` tokens the planner placed (n <= what fit allowed).
  void take(int64_t n, const KvGeometry& g, int64_t start);
  /// No further chunk can get a token.
  bool exhausted() const;
  /// Decodes plus the chunks taken.
  const StepComposition& composition() const { return step_; }
  const StepLimits& limits() const { return limits_; }

 private:
  bool within_target(const StepComposition& c) const;

  const StepCostModel& model_;
  StepLimits limits_;
  StepComposition step_;
  int64_t taken_ = 0;  // prefill tokens placed
};

/// The unqueued TTFT of a prompt of `tokens` tokens (geometry `g`) after `start` already in its
/// stream: the predicted time of the steps that would feed it alone beside the decodes
/// `decodes` under `limits`, chunk by chunk. 0 when the model is not trusted.
double unqueued_ttft_s(const StepCostModel& model, const StepComposition& decodes,
                       const StepLimits& limits, const KvGeometry& g, int64_t tokens,
                       int64_t start = 0);

}  // namespace rill
