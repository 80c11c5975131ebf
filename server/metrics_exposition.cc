#include "server/metrics_exposition.h"

#include <charconv>
#include <cmath>

namespace rill::server {
namespace {

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// HELP text escapes only backslash and newline (label values also escape the double quote).
std::string escape_help(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// `{a="x",b="y"}` with an optional extra label (histogram `le`) last; empty when no labels.
void append_labels(std::string& out, const MetricLabels& labels, const char* extra_name = nullptr,
                   const std::string& extra_value = {}) {
  if (labels.empty() && !extra_name) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += escape_label_value(v);
    out += '"';
  }
  if (extra_name) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

void append_sample(std::string& out, const std::string& name, const MetricLabels& labels,
                   double value, const char* extra_name = nullptr,
                   const std::string& extra_value = {}) {
  out += name;
  append_labels(out, labels, extra_name, extra_value);
  out += ' ';
  out += format_prometheus_value(value);
  out += '\n';
}

}  // namespace

std::string format_prometheus_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Shortest representation that round-trips (Go's strconv.ParseFloat reads any of them).
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string render_prometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    out += "# HELP " + f.name + ' ' + escape_help(f.help) + '\n';
    out += "# TYPE " + f.name + ' ' + type_name(f.type) + '\n';
    for (const MetricSeries& s : f.series) {
      if (f.type != MetricType::kHistogram) {
        append_sample(out, f.name, s.labels, s.value);
        continue;
      }
      const Histogram::Snapshot& h = s.histogram;
      // Buckets are cumulative; the last one (+Inf) counts every observation.
      for (size_t i = 0; i < h.bounds.size(); ++i) {
        const uint64_t c = i < h.cumulative.size() ? h.cumulative[i] : h.count;
        append_sample(out, f.name + "_bucket", s.labels, static_cast<double>(c), "le",
                      format_prometheus_value(h.bounds[i]));
      }
      append_sample(out, f.name + "_bucket", s.labels, static_cast<double>(h.count), "le", "+Inf");
      append_sample(out, f.name + "_sum", s.labels, h.sum);
      append_sample(out, f.name + "_count", s.labels, static_cast<double>(h.count));
    }
  }
  return out;
}

}  // namespace rill::server
