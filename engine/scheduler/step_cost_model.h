// The step-cost model: how long one engine step takes on this device and model, as a function of
// what it carries, fitted online from the steps the loop runs (no offline profile). The planner
// asks it how many prompt tokens a step may take beside its decodes (prefill_budget.h).
//
// Model. A step's time is linear in seven features of its composition:
//   t = c0 + c1 * decode_rows + c2 * decode_keys + c3 * mixed + c4 * chunks
//          + c5 * prefill_tokens + c6 * prefill_keys
// `mixed` is 1 when the step carries a prefill chunk; `*_keys` are the keys attention reads (one
// decode row reads its whole window; a chunk of n tokens after s cached ones reads about
// n * s + n^2 / 2). c3, the offset of a step with prefill, takes either sign: such steps run
// eagerly (decode-only steps replay CUDA graphs), which adds to it, but a decode step's matrix
// products are bound by reading the weights, so the first prompt tokens beside the decodes cost
// little, and a line fitted where the planner works (near its target) starts below the decode
// step. Every other coefficient but c0 is kept >= 0 (an active-set least squares), so a
// prediction never falls as a step with prefill grows and the planner's search is monotone.
//
// Fit. Weighted least squares on relative errors (weights 1 / t^2, so a 10 ms step counts as
// much as a 200 ms one) over two windows of the most recent steps: those with prefill and those
// without, `window` each, so that minutes of pure decode do not push every prefill step out of
// the data. A small relative ridge keeps collinear features (one chunk size seen so far) solvable.
// The fit is redone after every observation (two 7x7 solves: microseconds).
//
// Spread. Besides the fit, the model keeps the 95th percentile of measured / predicted over the
// steps with prefill (prefill_spread): the planner divides a per-step target by it.
//
// Warm-up. The model is trusted once it holds `min_decode_steps` decode-only steps and
// `min_prefill_steps` steps with prefill whose sizes span a factor of two at least (same-sized
// steps leave the per-token slope unidentified); before that the
// planner falls back to a fixed small chunk (prefill_budget.h). Once trusted, a step measured at
// more than 3x or less than a third of its prediction is set aside as an outlier (a CUDA graph
// captured during the step, a preempted host thread) unless 8 come in a row: then the device or
// the load changed, and the windows restart from those 8 (warming up again).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace rill {

/// What one step carries, as the cost model sees it.
struct StepComposition {
  int decode_rows = 0;      // one-token inputs of decoding sequences
  int64_t decode_keys = 0;  // keys their attention reads, summed over the rows
  int chunks = 0;           // prefill chunks (inputs feeding a prompt)
  int64_t prefill_tokens = 0;
  int64_t prefill_keys = 0;  // keys the chunks' tokens attend to, summed over the tokens

  /// This composition with a chunk of `tokens` tokens reading `keys` keys added.
  StepComposition with_chunk(int64_t tokens, int64_t keys) const {
    StepComposition c = *this;
    if (tokens <= 0) return c;
    ++c.chunks;
    c.prefill_tokens += tokens;
    c.prefill_keys += keys;
    return c;
  }
};

class StepCostModel {
 public:
  static constexpr int kFeatures = 7;
  struct Options {
    int window = 128;           // steps kept per kind (with prefill / without)
    int min_decode_steps = 16;  // decode-only steps before the model is trusted
    int min_prefill_steps = 8;  // steps with prefill (sizes spanning 2x) before it is trusted
  };

  StepCostModel() : StepCostModel(Options{}) {}
  explicit StepCostModel(Options options);

  /// Records a step measured at `seconds` (> 0) and refits.
  void observe(const StepComposition& c, double seconds);
  /// Past the warm-up: predictions are based on enough steps of both kinds.
  bool trusted() const { return trusted_; }
  /// Holds min_decode_steps decode-only steps: predictions of decode-only steps are measured
  /// ones (trusted() may still wait for steps with prefill).
  bool knows_decode() const {
    return fitted_ && static_cast<int>(decode_only_.size()) >= options_.min_decode_steps;
  }
  /// Predicted seconds of a step (>= 0); 0 before the first fit.
  double predict(const StepComposition& c) const;
  /// How far above its prediction a step with prefill runs in the worst 5%: the 95th percentile
  /// of measured / predicted over the window of such steps, refreshed with every fit (1 until
  /// min_prefill_steps are held, at least 1, at most kMaxSpread). Steps of one composition vary
  /// (19-26 ms for one predicted at 21 on the H100), and a target that bounds every step must
  /// leave room for the slow ones, not the mean.
  double prefill_spread() const { return spread_; }
  static constexpr double kMaxSpread = 1.5;

  /// Coefficients in milliseconds per feature unit (features() scales the inputs), for logs.
  const std::array<double, kFeatures>& coefficients() const { return coef_; }
  int64_t observations() const { return observations_; }
  int64_t outliers() const { return outliers_; }
  /// One line: samples, trust and the coefficients in readable units.
  std::string describe() const;

  /// The feature vector of `c` (scaled to O(1) for typical steps: keys per 1e5 for decode,
  /// prefill tokens per 1e3, prefill keys per 1e6).
  static std::array<double, kFeatures> features(const StepComposition& c);

 private:
  struct Sample {
    std::array<double, kFeatures> x;
    double ms;
  };
  void refit();
  bool far_from_prediction(const StepComposition& c, double ms) const;  // once trusted
  void add(const Sample& s, bool prefill);
  void restart_from_outliers();  // the windows hold only the outliers set aside

  Options options_;
  std::deque<Sample> decode_only_, with_prefill_;
  void update_spread();

  std::array<double, kFeatures> coef_{};
  double spread_ = 1.0;
  bool fitted_ = false, trusted_ = false;
  int64_t observations_ = 0, outliers_ = 0;
  std::vector<std::pair<Sample, bool>>
      outlier_run_;  // consecutive outliers set aside (with prefill?)
};

}  // namespace rill
