// rill-client's command line: what to send, where, and how to print it.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "clients/common/host_port.h"

namespace rill::client {

/// Exit codes; scripts tell the failures apart by them.
enum class ExitCode : int {
  kOk = 0,
  kClientError = 1,  // anything not below (I/O on stdout, an unexpected reply)
  kBadFlags = 2,     // CLI11's message
  kUnreachable = 3,  // connection refused, DNS
  kOverloaded = 4,   // HTTP 503 + Retry-After, gRPC RESOURCE_EXHAUSTED
  kServerError = 5,  // any other error status from the server
};

/// A failure with the exit code it maps to; main prints "rill-client: <what>".
class ClientError : public std::runtime_error {
 public:
  ClientError(ExitCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct ClientOptions {
  std::string target;                 // HOST:PORT
  bool use_grpc = false;              // --grpc; else --http
  std::optional<std::string> prompt;  // --prompt
  bool chat = false;                  // --chat
  std::optional<std::string> system;  // --system (chat only)
  bool json = false;                  // one JSON object instead of streamed text

  // Generation parameters; unset ones are left to the server's defaults.
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<uint64_t> seed;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::optional<std::string> cache;  // full | streaming
  int32_t sink = 0;
  int32_t window = 0;
  std::optional<int32_t> priority;
  std::optional<std::string> model;  // HTTP only; default: the first of GET /v1/models
  double timeout_s = 0;              // 0: none
};

/// Parses argv. Returns the options, or the exit code to leave with (--help: 0; bad flags: 2,
/// after CLI11 printed its message).
std::variant<ClientOptions, int> parse_options(int argc, char** argv);

}  // namespace rill::client
