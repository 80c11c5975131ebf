#include "server/json_fields.h"

#include <cmath>
#include <limits>

namespace rill::server {

using nlohmann::json;

void bad_field(const std::string& field, const std::string& why) {
  throw FieldError(field, "'" + field + "' " + why);
}

bool has_field(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

int64_t get_int_field(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) bad_field(key, "must be an integer");
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) bad_field(key, range);
    return static_cast<int64_t>(d);
  }
  if (!v.is_number_integer()) bad_field(key, "must be an integer");
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad_field(key, range);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_field(key, range);
  return x;
}

float get_float_field(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number()) bad_field(key, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad_field(key, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return static_cast<float>(d);
}

bool get_bool_field(const json& j, const char* key) {
  if (!j[key].is_boolean()) bad_field(key, "must be a boolean");
  return j[key].get<bool>();
}

std::vector<int32_t> get_id_list(const json& v, const char* key) {
  std::vector<int32_t> ids;
  for (const json& x : v) {
    if (!x.is_number_integer()) bad_field(key, "must be a list of integer token ids");
    const int64_t id = x.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max())
      bad_field(key, "has a token id out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

void parse_sampling_fields(const json& b, SamplingParams& s) {
  if (has_field(b, "temperature")) s.temperature = get_float_field(b, "temperature", 0, 100);
  if (has_field(b, "top_p")) s.top_p = get_float_field(b, "top_p", 0, 1);
  if (has_field(b, "top_k")) {
    const int64_t k = get_int_field(b, "top_k", -1, std::numeric_limits<int32_t>::max());
    s.top_k = k < 0 ? 0 : static_cast<int>(k);  // vLLM: -1 is off
  }
  if (has_field(b, "min_p")) s.min_p = get_float_field(b, "min_p", 0, 1);
  if (has_field(b, "presence_penalty"))
    s.presence_penalty = get_float_field(b, "presence_penalty", -2, 2);
  if (has_field(b, "frequency_penalty"))
    s.frequency_penalty = get_float_field(b, "frequency_penalty", -2, 2);
  if (has_field(b, "repetition_penalty"))
    s.repetition_penalty = get_float_field(b, "repetition_penalty", 0.01, 100);
  if (has_field(b, "seed"))
    s.seed = static_cast<uint64_t>(get_int_field(b, "seed", std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max()));
  try {
    s.validate();
  } catch (const Error& e) {
    throw FieldError("", e.what());
  }
}

std::optional<CachePolicy> parse_cache_field(const json& b) {
  if (!has_field(b, "cache")) return std::nullopt;
  const json& c = b["cache"];
  if (!c.is_object()) bad_field("cache", "must be an object {\"policy\", \"n_sink\", \"window\"}");
  std::string policy = "full";
  if (has_field(c, "policy")) {
    // Checked first: json::value() would throw a type error (an internal error, 500).
    if (!c["policy"].is_string()) bad_field("cache.policy", "must be \"full\" or \"streaming\"");
    policy = c["policy"].get<std::string>();
  }
  if (policy == "full") return CachePolicy::full();
  if (policy != "streaming") bad_field("cache.policy", "must be \"full\" or \"streaming\"");
  if (!has_field(c, "window")) bad_field("cache.window", "is required with the streaming policy");
  const int64_t n_sink = has_field(c, "n_sink") ? get_int_field(c, "n_sink", 0, 1 << 20) : 4;
  const int64_t window = get_int_field(c, "window", 1, std::numeric_limits<int32_t>::max());
  return CachePolicy::streaming(static_cast<int>(n_sink), static_cast<int>(window));
}

}  // namespace rill::server
