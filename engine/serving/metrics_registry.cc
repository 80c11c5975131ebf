#include "engine/serving/metrics_registry.h"

#include <algorithm>

#include "engine/error.h"

namespace rill {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end())
    throw Error(ErrorCode::kInvalidArgument, "histogram bounds must increase strictly");
}

void Histogram::observe(double v) {
  // Bucket i holds observations in (bounds[i-1], bounds[i]]; the last one the rest (+Inf).
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard lock(mu_);
  s.cumulative.resize(counts_.size());
  uint64_t total = 0;
  for (size_t i = 0; i < counts_.size(); ++i) s.cumulative[i] = (total += counts_[i]);
  s.count = total;
  s.sum = sum_;
  return s;
}

MetricsRegistry::MetricsRegistry(MetricLabels constant_labels)
    : constant_labels_(std::move(constant_labels)) {}

MetricsRegistry::Series& MetricsRegistry::series(const std::string& name, const std::string& help,
                                                 MetricType type, const MetricLabels& labels) {
  auto fam = std::find_if(families_.begin(), families_.end(),
                          [&](const Family& f) { return f.name == name; });
  if (fam == families_.end()) {
    families_.push_back({name, help, type, {}});
    fam = std::prev(families_.end());
  } else if (fam->type != type) {
    throw Error(ErrorCode::kInvalidArgument, "metric " + name + " registered with another type");
  }
  for (Series& s : fam->series)
    if (s.labels == labels) return s;
  fam->series.push_back({labels, nullptr, nullptr, nullptr});
  return fam->series.back();
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  const MetricLabels& labels) {
  std::lock_guard lock(mu_);
  Series& s = series(name, help, MetricType::kCounter, labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                              const MetricLabels& labels) {
  std::lock_guard lock(mu_);
  Series& s = series(name, help, MetricType::kGauge, labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& bounds,
                                      const MetricLabels& labels) {
  std::lock_guard lock(mu_);
  Series& s = series(name, help, MetricType::kHistogram, labels);
  if (!s.histogram) s.histogram = std::make_unique<Histogram>(bounds);
  return *s.histogram;
}

std::vector<MetricFamily> MetricsRegistry::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<MetricFamily> out;
  out.reserve(families_.size());
  for (const Family& f : families_) {
    MetricFamily m{f.name, f.help, f.type, {}};
    for (const Series& s : f.series) {
      MetricSeries ms;
      ms.labels = constant_labels_;
      ms.labels.insert(ms.labels.end(), s.labels.begin(), s.labels.end());
      if (s.counter) ms.value = s.counter->value();
      if (s.gauge) ms.value = s.gauge->value();
      if (s.histogram) ms.histogram = s.histogram->snapshot();
      m.series.push_back(std::move(ms));
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace rill
