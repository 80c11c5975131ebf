// Typed reads of request-body JSON fields, shared by the OpenAI-compatible endpoints and the
// session endpoints. Every failure is a FieldError naming the field with an OpenAI-style
// message, so the answer is a 400 whose "param" points at it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv/cache_policy.h"
#include "server/error_mapping.h"

namespace rill::server {

/// Throws FieldError(field, "'field' why").
[[noreturn]] void bad_field(const std::string& field, const std::string& why);

/// True when `j` has `key` with a non-null value (OpenAI clients send null for "unset").
bool has_field(const nlohmann::json& j, const char* key);

/// An integer in [lo, hi] (a float with an integral value is accepted, as Python clients send).
int64_t get_int_field(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi);
/// The same for a value already looked up, named `field` in errors ("cache.window").
int64_t get_int_value(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi);
bool get_bool_field(const nlohmann::json& j, const char* key);
/// A list of int32 token ids (range against the vocabulary is the caller's check).
std::vector<int32_t> get_id_list(const nlohmann::json& v, const char* key);

/// The "cache" field ({"policy": "full" | "streaming", "n_sink" (default 4), "window"}); nullopt
/// when absent. Ranges: checked_streaming_cache (request_fields.h). Sampling fields:
/// sampling_json.h.
std::optional<CachePolicy> parse_cache_field(const nlohmann::json& body);

}  // namespace rill::server
