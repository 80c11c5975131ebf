#include "engine/scheduler/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace rill {

namespace {

constexpr double kRidge = 1e-4;  // damping of the normal equations, relative to their diagonal
constexpr double kOutlierFactor =
    3.0;                        // a step this far from its prediction (either way) is set aside
constexpr int kOutlierRun = 8;  // ... unless this many come in a row
constexpr double kPrefillSizeSpread = 2;  // trusted once the largest prefill step is this x the smallest
constexpr int kMixedFeature = 3;
constexpr int kPrefillTokensFeature = 5;

// Solves the n x n system `a` x = `b` (row-major) by Gaussian elimination with partial pivoting.
// False when it is singular.
bool solve(std::vector<double> a, std::vector<double> b, int n, std::vector<double>& x) {
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r)
      if (std::fabs(a[r * n + col]) > std::fabs(a[pivot * n + col])) pivot = r;
    if (std::fabs(a[pivot * n + col]) < 1e-300) return false;
    if (pivot != col) {
      for (int k = 0; k < n; ++k) std::swap(a[col * n + k], a[pivot * n + k]);
      std::swap(b[col], b[pivot]);
    }
    for (int r = col + 1; r < n; ++r) {
      const double f = a[r * n + col] / a[col * n + col];
      if (f == 0) continue;
      for (int k = col; k < n; ++k) a[r * n + k] -= f * a[col * n + k];
      b[r] -= f * b[col];
    }
  }
  x.assign(n, 0);
  for (int r = n - 1; r >= 0; --r) {
    double s = b[r];
    for (int k = r + 1; k < n; ++k) s -= a[r * n + k] * x[k];
    x[r] = s / a[r * n + r];
  }
  return true;
}

}  // namespace

StepCostModel::StepCostModel(Options options) : options_(options) {
  options_.window = std::max(options_.window, 2 * kFeatures);
  options_.min_decode_steps = std::max(options_.min_decode_steps, 1);
  options_.min_prefill_steps = std::max(options_.min_prefill_steps, 2);
}

std::array<double, StepCostModel::kFeatures> StepCostModel::features(const StepComposition& c) {
  return {1.0,
          static_cast<double>(c.decode_rows),
          static_cast<double>(c.decode_keys) * 1e-5,
          c.chunks > 0 ? 1.0 : 0.0,
          static_cast<double>(c.chunks),
          static_cast<double>(c.prefill_tokens) * 1e-3,
          static_cast<double>(c.prefill_keys) * 1e-6};
}

double StepCostModel::predict(const StepComposition& c) const {
  if (!fitted_) return 0;
  const auto x = features(c);
  double ms = 0;
  for (int j = 0; j < kFeatures; ++j) ms += coef_[j] * x[j];
  return std::max(0.0, ms) * 1e-3;
}

// A graph captured during the step or a preempted host thread: far off the prediction either way.
bool StepCostModel::far_from_prediction(const StepComposition& c, double ms) const {
  if (!trusted_) return false;
  const double predicted = predict(c) * 1e3;
  return predicted > 0 && (ms > kOutlierFactor * predicted || ms * kOutlierFactor < predicted);
}

void StepCostModel::add(const Sample& s, bool prefill) {
  std::deque<Sample>& window = prefill ? with_prefill_ : decode_only_;
  window.push_back(s);
  if (static_cast<int>(window.size()) > options_.window) window.pop_front();
}

void StepCostModel::restart_from_outliers() {
  decode_only_.clear();
  with_prefill_.clear();
  for (const auto& [sample, prefill] : outlier_run_) add(sample, prefill);
  outliers_ -= static_cast<int64_t>(outlier_run_.size());
  outlier_run_.clear();
}

void StepCostModel::observe(const StepComposition& c, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  ++observations_;
  const Sample sample{features(c), seconds * 1e3};
  if (far_from_prediction(c, sample.ms)) {
    ++outliers_;
    outlier_run_.emplace_back(sample, c.chunks > 0);
    if (static_cast<int>(outlier_run_.size()) < kOutlierRun) return;  // set aside
    restart_from_outliers();  // they keep coming: the device or the load changed
  } else {
    outlier_run_.clear();
    add(sample, c.chunks > 0);
  }
  refit();
  update_spread();
  // The per-token slope is identified only by prefill steps of clearly different sizes: steps of
  // 8,192 and 7,975 tokens (an offline burst's first batch) fit a large offset and no slope.
  double smallest = std::numeric_limits<double>::infinity(), largest = 0;
  for (const Sample& s : with_prefill_) {
    smallest = std::min(smallest, s.x[kPrefillTokensFeature]);
    largest = std::max(largest, s.x[kPrefillTokensFeature]);
  }
  trusted_ = fitted_ && static_cast<int>(decode_only_.size()) >= options_.min_decode_steps &&
             static_cast<int>(with_prefill_.size()) >= options_.min_prefill_steps &&
             largest >= kPrefillSizeSpread * smallest;
}

// Weighted (1 / t^2) least squares over both windows; the coefficients but c0 and c3 (offsets) kept
// >= 0 by dropping the most negative one and solving again (at most kFeatures - 2 times).
void StepCostModel::refit() {
  constexpr int n = kFeatures;
  std::vector<double> a(n * n, 0), b(n, 0);
  for (const std::deque<Sample>* window : {&decode_only_, &with_prefill_})
    for (const Sample& s : *window) {
      const double w = 1.0 / (s.ms * s.ms);
      for (int i = 0; i < n; ++i) {
        b[i] += w * s.x[i] * s.ms;
        for (int j = 0; j < n; ++j) a[i * n + j] += w * s.x[i] * s.x[j];
      }
    }
  for (int i = 0; i < n; ++i) a[i * n + i] += kRidge * a[i * n + i] + 1e-12;
  std::array<bool, n> active{};
  active.fill(true);
  for (int round = 0; round < n; ++round) {
    std::vector<int> idx;
    for (int j = 0; j < n; ++j)
      if (active[j]) idx.push_back(j);
    const int m = static_cast<int>(idx.size());
    std::vector<double> ar(m * m), br(m), x;
    for (int i = 0; i < m; ++i) {
      br[i] = b[idx[i]];
      for (int j = 0; j < m; ++j) ar[i * m + j] = a[idx[i] * n + idx[j]];
    }
    if (!solve(ar, br, m, x)) return;  // keep the previous fit
    int worst = -1;
    for (int i = 0; i < m; ++i)
      if (idx[i] != 0 && idx[i] != kMixedFeature && x[i] < 0 && (worst < 0 || x[i] < x[worst]))
        worst = i;
    if (worst < 0) {
      coef_.fill(0);
      for (int i = 0; i < m; ++i) coef_[idx[i]] = x[i];
      fitted_ = true;
      return;
    }
    active[idx[worst]] = false;
  }
}

void StepCostModel::update_spread() {
  spread_ = 1.0;
  if (!fitted_ || static_cast<int>(with_prefill_.size()) < options_.min_prefill_steps) return;
  std::vector<double> ratios;
  ratios.reserve(with_prefill_.size());
  for (const Sample& s : with_prefill_) {
    double predicted = 0;
    for (int j = 0; j < kFeatures; ++j) predicted += coef_[j] * s.x[j];
    if (predicted > 0) ratios.push_back(s.ms / predicted);
  }
  if (ratios.empty()) return;
  const size_t at = std::min(ratios.size() - 1, static_cast<size_t>(0.95 * ratios.size()));
  std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(at), ratios.end());
  spread_ = std::clamp(ratios[at], 1.0, kMaxSpread);
}

std::string StepCostModel::describe() const {
  char line[320];
  std::snprintf(
      line, sizeof line,
      "step cost (ms) = %.3f + %.4f/row + %.3f/100k decode keys + %.3f if prefill + %.3f/chunk + "
      "%.3f/1k prefill tokens + %.3f/1M prefill keys; spread %.3f; %zu decode-only + %zu prefill "
      "steps, %s",
      coef_[0], coef_[1], coef_[2], coef_[3], coef_[4], coef_[5], coef_[6], spread_,
      decode_only_.size(), with_prefill_.size(), trusted_ ? "trusted" : "warming up");
  return line;
}

}  // namespace rill
