// Engine-side metrics: counters, gauges and histograms with labels, updated by the engine's
// threads and read as a snapshot. The server renders snapshots (Prometheus text format); the
// engine never formats them. Names, help texts and bucket bounds are in engine_metrics.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rill {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void add(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  /// `bounds`: increasing upper bounds of the buckets (the +Inf bucket is implicit).
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // [bounds + 1]: observations <= each bound, then all
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds + 1], per bucket (not cumulative)
  double sum_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricSeries {
  MetricLabels labels;  // the registry's constant labels first
  double value = 0;     // counter, gauge
  Histogram::Snapshot histogram;
};

struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kCounter;
  std::vector<MetricSeries> series;
};

class MetricsRegistry {
 public:
  /// `constant_labels` go on every series (e.g. {"model_name", "rill-shakespeare"}).
  explicit MetricsRegistry(MetricLabels constant_labels = {});
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  /// Registers (or returns the existing) series of a family; references stay valid for the
  /// registry's lifetime. Throws kInvalidArgument on a name reused with another type.
  Counter& counter(const std::string& name, const std::string& help,
                   const MetricLabels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::vector<double>& bounds, const MetricLabels& labels = {});

  /// Every family in registration order, series in registration order.
  std::vector<MetricFamily> snapshot() const;

 private:
  struct Series {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name, help;
    MetricType type;
    std::deque<Series> series;
  };
  Series& series(const std::string& name, const std::string& help, MetricType type,
                 const MetricLabels& labels);

  MetricLabels constant_labels_;
  mutable std::mutex mu_;
  std::deque<Family> families_;
};

}  // namespace rill
