// Checks of the generation fields both front ends take (max / min tokens, stop strings and ids,
// the cache policy), in protocol-neutral form: HTTP (openai_api.cc, session_api.cc) and gRPC
// (grpc_convert.h) call the same function with the same limits, so a value gets the same answer
// and message on both. Sampling fields have their own table (engine/runner/sampling_fields.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv/cache_policy.h"

namespace rill::server {

/// Largest max_tokens / min_tokens a request may ask for.
inline constexpr int64_t kMaxTokensLimit = int64_t{1} << 24;
/// Largest n_sink of a streaming cache (the server's max_sink applies on top).
inline constexpr int64_t kMaxSinkLimit = int64_t{1} << 20;

/// `value` of a token count ("max_tokens", "min_tokens"); FieldError(field) unless in
/// [0, kMaxTokensLimit].
int checked_token_count(const std::string& field, int64_t value);

/// Stop strings as sent, without the empty ones (OpenAI clients send ""; an empty string stops
/// nothing). FieldError("stop") for more than kMaxStopStrings or one over kMaxStopStringBytes.
std::vector<std::string> checked_stop_strings(const std::vector<std::string>& stop);

/// FieldError("stop_token_ids") for an id outside [0, vocab_size).
void check_stop_token_ids(const std::vector<int32_t>& ids, int vocab_size);

/// A streaming policy from its parts: FieldError("cache.n_sink") unless n_sink is in
/// [0, kMaxSinkLimit], FieldError("cache.window") unless window is in [1, 2^31 - 1]. The engine
/// checks them against the server's limits and the model's context.
CachePolicy checked_streaming_cache(int64_t n_sink, int64_t window);

}  // namespace rill::server
