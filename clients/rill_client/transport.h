// What a transport sends (one completion or one chat turn) and what it returns. Both transports
// (gRPC, HTTP) stream text through a callback and throw ClientError on failure.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clients/rill_client/client_options.h"

namespace rill::client {

/// One request: a completion of `prompt`, or a chat of `messages` (exactly one is used).
struct GenerateInput {
  const std::string* prompt = nullptr;
  const std::vector<ChatMessage>* messages = nullptr;
};

/// The server's own timings (gRPC FinalInfo).
struct ServerTimings {
  double queue_s = 0, ttft_s = 0, tpot_s = 0, e2e_s = 0;
};

struct Generation {
  std::string text;
  std::vector<int> token_ids;  // gRPC only
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::optional<ServerTimings> server_timings;  // gRPC only
};

/// Called for every message that carries generated tokens (text may be empty: a held-back stop).
using ChunkCallback = std::function<void(std::string_view text)>;

/// Generate over gRPC (rill.v1.Rill/Generate).
Generation grpc_generate(const ClientOptions& options, const GenerateInput& input,
                         const ChunkCallback& on_chunk);

/// Generate over HTTP (POST /v1/completions or /v1/chat/completions, SSE).
Generation http_generate(const ClientOptions& options, const GenerateInput& input,
                         const ChunkCallback& on_chunk);

}  // namespace rill::client
