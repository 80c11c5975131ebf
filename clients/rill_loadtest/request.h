// What rill-loadtest sends (RequestSpec) and what it measures for each request (RequestRecord),
// shared by both transports, the runner and the reports.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rill::loadtest {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

/// A long-lived stream's handle (--streams): the transport sets `started` at its first token, and
/// cancels the request at its next chunk once the client sets `stop`.
struct StreamControl {
  std::atomic<bool> started{false};
  std::atomic<bool> stop{false};
};

/// One request. Exactly one input is used: `messages` when `chat`, else `prompt_ids` when not
/// empty, else `prompt_text`.
struct RequestSpec {
  bool chat = false;
  std::vector<ChatMessage> messages;
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  int max_tokens = 16;
  bool ignore_eos = true;
  std::optional<double> temperature;
  std::string cache;  // "" (server default), "full" or "streaming"
  int32_t sink = 0, window = 0;
  int cancel_after_tokens = -1;  // >= 1: the client cancels once it received this many tokens
  bool keep_text = false;        // multi-turn: the answer is the next turn's history
  int group = -1;                // shared-prefix group (--shared-prefix-groups), -1: none
  std::optional<int> ttft_target_ms, tpot_target_ms;  // latency targets sent (--targets)
  std::shared_ptr<StreamControl> control;             // a long-lived stream (--streams)
};

/// What happened to one request. Times are seconds since the run's epoch (steady clock).
struct RequestRecord {
  int64_t id = 0;            // issue order within the run
  int64_t conversation = 0;  // the conversation (one per request unless --turns > 1)
  int turn = 0;              // 0-based turn within the conversation
  int group = -1;            // shared-prefix group, -1: none
  bool warmup = false;
  double start_s = 0;                 // the request was sent
  double end_s = 0;                   // the stream ended (or failed, or was cancelled)
  std::vector<double> chunk_times_s;  // arrival of each chunk that carried >= 1 token
  std::vector<int> chunk_tokens;      // tokens in that chunk
  int64_t prompt_tokens = 0;          // from the server's usage (0 when none arrived)
  int64_t cached_tokens = 0;          // of those, taken from the server's prefix cache
  int64_t output_tokens = 0;          // usage's completion tokens, else the tokens received
  bool usage_seen = false;
  std::string finish_reason;  // stop | length | ... ("" when the stream did not finish)
  bool cancelled = false;     // cancelled by the client (--cancel-fraction)
  std::string error;          // "" when it succeeded: "HTTP 503", "grpc RESOURCE_EXHAUSTED", ...
  std::string error_message;  // the details
  std::string text;           // the answer (kept for multi-turn only)

  bool ok() const { return error.empty() && !cancelled; }
  int64_t tokens_received() const;
};

/// Derived latencies of a successful request (vLLM's definitions).
struct RequestLatency {
  double ttft_s = 0;             // first token-carrying chunk - start
  double e2e_s = 0;              // end - start
  std::optional<double> tpot_s;  // (e2e - ttft) / (output_tokens - 1), when output_tokens > 1
  std::vector<double> itl_s;     // gaps between consecutive token-carrying chunks
};

/// The latencies of `r` (a record with at least one chunk).
RequestLatency latency_of(const RequestRecord& r);

}  // namespace rill::loadtest
