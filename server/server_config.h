// rill-server's configuration: a JSON file (configs/*.json) overridden by command-line flags.
// Every value is checked at start; a bad one is rejected with a message naming its field.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/runner/engine_options.h"
#include "engine/runner/sampling_fields.h"
#include "engine/scheduler/scheduler_config.h"

namespace rill::server {

struct ServerConfig {
  std::string model = "models/rill-shakespeare";  // model directory or llama2.c checkpoint
  std::string served_model_name;                  // the "model" clients name (default: dir name)
  std::string host = "0.0.0.0";                   // bind address of both listeners
  int http_port = 8000;                           // 0: an ephemeral port (printed at start)
  int grpc_port = 50051;
  int http_threads = 2;                         // Asio threads serving every connection
  int max_connections = 10'000;                 // open HTTP connections (also bounded by the fds)
  int64_t max_body_bytes = 1 << 20;             // larger HTTP bodies: 413
  int64_t max_buffered_body_bytes = 256 << 20;  // unfinished bodies of all connections: 503
  int64_t max_stream_buffer_bytes = 1 << 20;    // unsent SSE bytes before a slow reader is cut
  int max_prompt_tokens = 0;                    // 0: the model's context
  double drain_timeout_s = 30;                  // SIGTERM: wait this long for in-flight requests
  std::string log_level = "info";               // trace debug info warn error critical off
  bool access_log = true;
  // Sampling defaults of requests that leave a field unset (docs/api.md, "Sampling fields"):
  // default_sampling, then the generation_config.json named here, then OpenAI's.
  std::string generation_config = "auto";  // auto (the model's) | none | a file or directory
  SamplingOverrides default_sampling;      // {"temperature": 0.7, ...}: over the model's
  // Tool calls in chat replies (docs/api.md, "Tools"): auto (the chat template's family) |
  // hermes | llama3_json | mistral | mistral_v11 | none.
  std::string tool_call_parser = "auto";
  EngineOptions engine;
  SchedulerConfig scheduler;
  std::set<std::string> explicit_fields;  // paths set by the file or a flag
};

/// Takes the runner's scheduler defaults (scheduler_defaults("cpu" | "cuda")) for every
/// scheduler field the file and flags left unset.
void apply_scheduler_defaults(ServerConfig& config, const SchedulerConfig& defaults);

/// Reads a configuration file (throws kInvalidArgument naming the field or the JSON error).
ServerConfig load_config_file(const std::string& path);

/// Checks every value against its documented range (docs/api.md#limits) and the rules between
/// values; throws kInvalidArgument "<field>: <why>".
void validate_config(const ServerConfig& config);

/// One row of the configuration table, for --help and the documentation check: the JSON path,
/// the flag, and the range of a numeric value ("[1, 2592000000]", "(0, 1]"; empty otherwise).
struct ConfigFieldInfo {
  std::string path, flag, range;
};
std::vector<ConfigFieldInfo> config_fields();

/// Parses the command line: --config FILE first, then every flag overrides the file. Returns
/// false after printing --help (exit 0). Throws kInvalidArgument on a bad flag or value.
bool parse_command_line(int argc, char** argv, ServerConfig& config);

/// The configuration as JSON (what a file holds; logged at start). `unset_scheduler`: false
/// leaves out the scheduler fields that neither the file nor a flag set (before the runner is
/// chosen they are not yet the values in force: apply_scheduler_defaults sets them).
std::string config_to_json(const ServerConfig& config, bool unset_scheduler = true);

/// The scheduler section alone (the values in force once apply_scheduler_defaults ran).
std::string scheduler_to_json(const ServerConfig& config);

}  // namespace rill::server
