#include "clients/rill_loadtest/prom_text.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace rill::loadtest {
namespace {

double parse_value(const std::string& s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  size_t used = 0;
  const double v = std::stod(s, &used);
  if (used != s.size()) throw std::invalid_argument("bad sample value '" + s + "'");
  return v;
}

// Parses `{a="x",b="y"}` starting at line[pos] == '{'; returns the index after '}'.
size_t parse_labels(const std::string& line, size_t pos, std::map<std::string, std::string>& out) {
  ++pos;
  while (pos < line.size() && line[pos] != '}') {
    const size_t eq = line.find('=', pos);
    if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
      throw std::invalid_argument("bad label in '" + line + "'");
    const std::string key = line.substr(pos, eq - pos);
    std::string value;
    size_t i = eq + 2;
    for (; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value += line[i] == 'n' ? '\n' : line[i];
      } else {
        value += line[i];
      }
    }
    if (i >= line.size()) throw std::invalid_argument("unterminated label in '" + line + "'");
    out[key] = value;
    pos = i + 1;
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  if (pos >= line.size()) throw std::invalid_argument("unterminated labels in '" + line + "'");
  return pos + 1;
}

}  // namespace

PromSnapshot PromSnapshot::parse(const std::string& text) {
  PromSnapshot snap;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    PromSample s;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) throw std::invalid_argument("bad sample line '" + line + "'");
    s.name = line.substr(0, pos);
    if (line[pos] == '{') pos = parse_labels(line, pos, s.labels);
    while (pos < line.size() && line[pos] == ' ') ++pos;
    const size_t value_end = line.find(' ', pos);
    s.value = parse_value(
        line.substr(pos, value_end == std::string::npos ? std::string::npos : value_end - pos));
    snap.samples_.push_back(std::move(s));
  }
  return snap;
}

double PromSnapshot::sum(const std::string& name,
                         const std::map<std::string, std::string>& match) const {
  double total = 0;
  for (const PromSample& s : samples_) {
    if (s.name != name) continue;
    const bool all = std::all_of(match.begin(), match.end(), [&](const auto& kv) {
      const auto it = s.labels.find(kv.first);
      return it != s.labels.end() && it->second == kv.second;
    });
    if (all) total += s.value;
  }
  return total;
}

std::vector<std::string> PromSnapshot::label_values(const std::string& name,
                                                    const std::string& label) const {
  std::vector<std::string> out;
  for (const PromSample& s : samples_) {
    if (s.name != name) continue;
    const auto it = s.labels.find(label);
    if (it != s.labels.end() && std::find(out.begin(), out.end(), it->second) == out.end())
      out.push_back(it->second);
  }
  return out;
}

std::optional<double> histogram_quantile(const PromSnapshot& before, const PromSnapshot& after,
                                         const std::string& name, double q) {
  const std::string bucket = name + "_bucket";
  std::vector<std::pair<double, double>> cumulative;  // (upper bound, observations gained)
  for (const std::string& le : after.label_values(bucket, "le"))
    cumulative.emplace_back(parse_value(le),
                            after.sum(bucket, {{"le", le}}) - before.sum(bucket, {{"le", le}}));
  std::sort(cumulative.begin(), cumulative.end());
  if (cumulative.empty() || cumulative.back().second <= 0) return std::nullopt;
  const double rank = q * cumulative.back().second;
  double lower = 0, below = 0;
  for (const auto& [bound, count] : cumulative) {
    if (count >= rank && count > below) {
      if (std::isinf(bound)) return lower;
      return lower + (bound - lower) * (rank - below) / (count - below);
    }
    lower = bound;
    below = count;
  }
  return lower;
}

}  // namespace rill::loadtest
