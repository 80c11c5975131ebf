#include "clients/rill_loadtest/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace rill::loadtest {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / n);
  s.min = values.front();
  s.max = values.back();
  s.median = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p95 = percentile(values, 95);
  s.p99 = percentile(values, 99);
  return s;
}

Targets parse_targets(const std::string& spec) {
  Targets t;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t colon = part.find(':');
    const std::string key = part.substr(0, colon);
    long long ms = -1;
    size_t used = 0;
    if (colon != std::string::npos) {
      try {
        ms = std::stoll(part.substr(colon + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
    }
    if (colon == std::string::npos || used == 0 || used != part.size() - colon - 1 || ms < 0 ||
        ms > 3'600'000)
      throw std::invalid_argument("target '" + part +
                                  "': expected ttft:MS or tpot:MS, MS in [0, 3600000]");
    std::optional<int>* slot = key == "ttft" ? &t.ttft_ms : key == "tpot" ? &t.tpot_ms : nullptr;
    if (!slot) throw std::invalid_argument("target '" + part + "': unknown target '" + key + "'");
    *slot = static_cast<int>(ms);
  }
  return t;
}

Slo parse_slo(const std::string& spec) {
  Slo slo;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t colon = part.find(':');
    const std::string key = part.substr(0, colon);
    double ms = 0;
    size_t used = 0;
    if (colon != std::string::npos) {
      try {
        ms = std::stod(part.substr(colon + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
    }
    if (colon == std::string::npos || used == 0 || used != part.size() - colon - 1 || !(ms > 0))
      throw std::invalid_argument("SLO '" + part + "': expected ttft:MS, tpot:MS or e2e:MS");
    std::optional<double>* slot = key == "ttft"   ? &slo.ttft_s
                                  : key == "tpot" ? &slo.tpot_s
                                  : key == "e2e"  ? &slo.e2e_s
                                                  : nullptr;
    if (!slot) throw std::invalid_argument("SLO '" + part + "': unknown metric '" + key + "'");
    *slot = ms / 1000.0;
  }
  return slo;
}

bool meets_slo(const Slo& slo, double ttft_s, std::optional<double> tpot_s, double e2e_s) {
  if (slo.ttft_s && ttft_s > *slo.ttft_s) return false;
  if (slo.tpot_s && tpot_s && *tpot_s > *slo.tpot_s) return false;
  if (slo.e2e_s && e2e_s > *slo.e2e_s) return false;
  return true;
}

}  // namespace rill::loadtest
