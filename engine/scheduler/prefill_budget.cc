#include "engine/scheduler/prefill_budget.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rill {

int64_t attended_keys(const KvGeometry& g, int64_t start, int64_t n) {
  if (n <= 0) return 0;
  // Query at position i reads min(i + 1, cap) keys: sum v = i + 1 over [a, b], capped at `cap`.
  const int64_t a = start + 1, b = start + n;
  const int64_t cap =
      g.window > 0 ? int64_t{g.n_sink} + g.window : std::numeric_limits<int64_t>::max();
  auto ramp = [](int64_t lo, int64_t hi) {
    return (lo + hi) * (hi - lo + 1) / 2;
  };  // lo + ... + hi
  if (b <= cap) return ramp(a, b);
  if (a > cap) return n * cap;
  return ramp(a, cap) + (b - cap) * cap;
}

double steady_step_s(const StepCostModel& model, const StepComposition& decodes, int rows) {
  if (decodes.decode_rows <= 0 || rows <= 0) return 0;
  StepComposition steady;
  steady.decode_rows = rows;
  steady.decode_keys = decodes.decode_keys * rows / decodes.decode_rows;
  return model.predict(steady);
}

double pace_allowance_s(const StreamPace& p, double steady_s) {
  const double per_step = kStepHeadroom * p.tpot.seconds;
  if (p.elapsed_s < 0) return per_step;
  if (p.left > 0 && p.elapsed_s + static_cast<double>(p.left) * steady_s >
                        p.tpot.seconds * static_cast<double>(p.intervals + p.left))
    return std::numeric_limits<double>::infinity();  // a lost cause
  const int64_t ahead = std::max<int64_t>(1, p.remaining);
  const double mean_bound = per_step * static_cast<double>(p.intervals + ahead) - p.elapsed_s -
                            static_cast<double>(ahead - 1) * steady_s;
  return std::max(0.0, mean_bound);
}

StepLimits step_limits(std::span<const StreamPace> paces, double steady_s, bool trusted,
                       int token_cap, int min_tokens, int warmup_tokens, double spread) {
  const double auto_headroom = std::min(kAutoStepHeadroom, 1.0 / std::max(1.0, spread));
  StepLimits l;
  l.token_cap = std::max(0, token_cap);
  l.min_tokens = min_tokens;
  l.warmup_tokens = warmup_tokens;
  double tightest = std::numeric_limits<double>::infinity();
  for (const StreamPace& p : paces) {
    if (p.tpot.kind == LatencyTarget::Kind::kFixed) {
      const double allowance = pace_allowance_s(p, steady_s);
      if (std::isinf(allowance)) continue;  // a lost cause constrains nothing
      l.constrained = true;
      tightest = std::min(tightest, allowance);
    } else if (p.tpot.kind == LatencyTarget::Kind::kAuto && steady_s > 0) {
      l.constrained = true;  // an auto target exists once the steady step is measured
      // The stream's own target (what it is judged by) where it has one and the batch being
      // built (queued prompts counted) decodes within it; a batch that decodes slower than it
      // would only keep the queue waiting, and its own pace applies.
      const double batch = kAutoTpotFactor * steady_s;
      const double own = p.tpot.seconds;
      const double bound = own > 0 && auto_headroom * own >= steady_s ? std::min(own, batch) : batch;
      tightest = std::min(tightest, auto_headroom * bound);
    }
  }
  if (l.constrained && trusted && tightest < std::numeric_limits<double>::infinity())
    l.target_s = tightest;
  else
    l.warming_up = l.constrained;
  return l;
}

PrefillBudget::PrefillBudget(const StepCostModel& model, const StepComposition& decodes,
                             const StepLimits& limits)
    : model_(model), limits_(limits), step_(decodes) {}

bool PrefillBudget::within_target(const StepComposition& c) const {
  return model_.predict(c) <= limits_.target_s;
}

int64_t PrefillBudget::fit(int64_t want, const KvGeometry& g, int64_t start) const {
  int64_t n = std::min<int64_t>(want, limits_.token_cap - taken_);
  if (n <= 0 || !limits_.constrained) return std::max<int64_t>(n, 0);
  if (limits_.warming_up)  // a fixed small allowance per step
    return std::max<int64_t>(0, std::min<int64_t>(n, limits_.warmup_tokens - taken_));
  const int64_t floor = taken_ == 0 ? std::min<int64_t>(n, limits_.min_tokens) : 0;
  if (within_target(step_.with_chunk(n, attended_keys(g, start, n)))) return n;
  int64_t lo = 0, hi = n;  // lo fits (or is 0), hi does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (within_target(step_.with_chunk(mid, attended_keys(g, start, mid))) ? lo : hi) = mid;
  }
  lo = std::max(lo, floor);
  // Top the step up to the runner's granularity: the tokens up to it cost nothing.
  const int64_t G = std::max(1, limits_.granularity);
  if (G > 1 && lo > 0) {
    const int64_t tokens = step_.decode_rows + step_.prefill_tokens + lo;
    lo = std::min(n, lo + (G - tokens % G) % G);
  }
  return lo;
}

void PrefillBudget::take(int64_t n, const KvGeometry& g, int64_t start) {
  if (n <= 0) return;
  step_ = step_.with_chunk(n, attended_keys(g, start, n));
  taken_ += n;
}

bool PrefillBudget::exhausted() const {
  if (taken_ >= limits_.token_cap) return true;
  if (!limits_.constrained || taken_ == 0) return false;
  if (limits_.warming_up) return taken_ >= limits_.warmup_tokens;
  return !within_target(step_.with_chunk(1, 1));  // not even one more token of a fresh prompt
}

double unqueued_ttft_s(const StepCostModel& model, const StepComposition& decodes,
                       const StepLimits& limits, const KvGeometry& g, int64_t tokens,
                       int64_t start) {
  if (!model.trusted() || tokens <= 0) return 0;
  StepLimits l = limits;  // a step the decodes fill now has room again later: at least min_tokens
  l.token_cap = std::max(l.token_cap, std::max(1, l.min_tokens));
  constexpr int kMaxSteps = 1024;  // past this many steps, the rest is extrapolated (bounded work)
  double total = 0;
  int64_t fed = 0;
  for (int steps = 0; fed < tokens && steps < kMaxSteps; ++steps) {
    const PrefillBudget step(model, decodes, l);
    const int64_t n = std::max<int64_t>(1, step.fit(tokens - fed, g, start + fed));
    total += model.predict(decodes.with_chunk(n, attended_keys(g, start + fed, n)));
    fed += n;
  }
  if (fed < tokens) total *= static_cast<double>(tokens) / static_cast<double>(fed);
  return total;
}

}  // namespace rill
