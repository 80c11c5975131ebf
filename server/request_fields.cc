#include "server/request_fields.h"

#include <limits>

#include "engine/error.h"
#include "engine/scheduler/latency_targets.h"
#include "engine/serving/request_validation.h"

namespace rill::server {
namespace {

void check_range(const std::string& field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi)
    throw FieldError(field, "'" + field + "' must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
}

}  // namespace

int checked_token_count(const std::string& field, int64_t value) {
  check_range(field, value, 0, kMaxTokensLimit);
  return static_cast<int>(value);
}

std::vector<std::string> checked_stop_strings(const std::vector<std::string>& stop) {
  std::vector<std::string> out;
  for (const std::string& s : stop)
    if (!s.empty()) out.push_back(s);
  if (out.size() > kMaxStopStrings)
    throw FieldError("stop",
                     "'stop' has more than " + std::to_string(kMaxStopStrings) + " strings");
  for (const std::string& s : out)
    if (s.size() > kMaxStopStringBytes)
      throw FieldError(
          "stop", "'stop' has a string over " + std::to_string(kMaxStopStringBytes) + " bytes");
  return out;
}

void check_stop_token_ids(const std::vector<int32_t>& ids, int vocab_size) {
  for (int32_t id : ids)
    if (id < 0 || id >= vocab_size)
      throw FieldError("stop_token_ids", "'stop_token_ids' has token id " + std::to_string(id) +
                                             ", out of range [0, " + std::to_string(vocab_size) +
                                             ")");
}

std::chrono::milliseconds checked_latency_target(const std::string& field, int64_t value) {
  check_range(field, value, 0, kMaxLatencyTarget.count());
  return std::chrono::milliseconds(value);
}

CachePolicy checked_streaming_cache(int64_t n_sink, int64_t window) {
  check_range("cache.n_sink", n_sink, 0, kMaxSinkLimit);
  check_range("cache.window", window, 1, std::numeric_limits<int32_t>::max());
  return CachePolicy::streaming(static_cast<int>(n_sink), static_cast<int>(window));
}

}  // namespace rill::server
