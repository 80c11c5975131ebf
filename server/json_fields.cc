#include "server/json_fields.h"

#include <cmath>
#include <limits>

#include "server/request_fields.h"

namespace rill::server {

using nlohmann::json;

void bad_field(const std::string& field, const std::string& why) {
  throw FieldError(field, "'" + field + "' " + why);
}

bool has_field(const json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

int64_t get_int_value(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) bad_field(field, "must be an integer");
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) bad_field(field, range);
    return static_cast<int64_t>(d);
  }
  if (!v.is_number_integer()) bad_field(field, "must be an integer");
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad_field(field, range);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad_field(field, range);
  return x;
}

int64_t get_int_field(const json& j, const char* key, int64_t lo, int64_t hi) {
  return get_int_value(j[key], key, lo, hi);
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

std::optional<CachePolicy> parse_cache_field(const json& b) {
  if (!has_field(b, "cache")) return std::nullopt;
  const json& c = b["cache"];
  if (!c.is_object()) bad_field("cache", "must be an object {\"policy\", \"n_sink\", \"window\"}");
  const json policy = has_field(c, "policy") ? c["policy"] : json("full");
  if (policy == "full") return CachePolicy::full();
  if (policy != "streaming") bad_field("cache.policy", "must be \"full\" or \"streaming\"");
  if (!has_field(c, "window")) bad_field("cache.window", "is required with the streaming policy");
  // The same ranges and messages as checked_streaming_cache, which gRPC uses.
  const int64_t n_sink =
      has_field(c, "n_sink") ? get_int_value(c["n_sink"], "cache.n_sink", 0, kMaxSinkLimit) : 4;
  const int64_t window =
      get_int_value(c["window"], "cache.window", 1, std::numeric_limits<int32_t>::max());
  return checked_streaming_cache(n_sink, window);
}

}  // namespace rill::server
