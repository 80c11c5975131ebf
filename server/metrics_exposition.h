// Renders MetricsRegistry snapshots in the Prometheus text exposition format 0.0.4
// (docs/metrics.md): HELP and TYPE lines, escaped label values, cumulative histogram buckets
// ending in le="+Inf", then _sum and _count. Accepted by `promtool check metrics`.
#pragma once

#include <string>
#include <vector>

#include "engine/serving/metrics_registry.h"

namespace rill::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/// The whole exposition of `families` (registration order kept).
std::string render_prometheus(const std::vector<MetricFamily>& families);

/// A sample value as Prometheus reads it: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string format_prometheus_value(double v);
/// A label value with backslash, double quote and newline escaped.
std::string escape_label_value(const std::string& v);

}  // namespace rill::server
