// A reader of the Prometheus text exposition format (what rill-server's /metrics answers) and
// the before/after arithmetic rill-loadtest does on it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rill::loadtest {

/// One sample line: `name{label="value",...} value`.
struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// Every sample of one scrape.
class PromSnapshot {
 public:
  /// Parses exposition text; comment lines and blank lines are skipped, timestamps ignored.
  /// Throws std::invalid_argument on a malformed sample line.
  static PromSnapshot parse(const std::string& text);

  /// Sum of the samples named `name` whose labels include every pair of `match`; 0 when none.
  double sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;

  /// Distinct values of label `label` among the samples named `name`.
  std::vector<std::string> label_values(const std::string& name, const std::string& label) const;

  const std::vector<PromSample>& samples() const { return samples_; }

 private:
  std::vector<PromSample> samples_;
};

/// The q-quantile (q in [0, 1]) of the observations histogram `name` (its `name_bucket{le=...}`
/// series, summed over other labels) gained between two scrapes, interpolated linearly within
/// the bucket as Prometheus' histogram_quantile does (a quantile in the +Inf bucket is the
/// largest finite bound); nullopt without observations.
std::optional<double> histogram_quantile(const PromSnapshot& before, const PromSnapshot& after,
                                         const std::string& name, double q);

}  // namespace rill::loadtest
