#include "clients/rill_client/client_options.h"

#include <iostream>

#include <CLI/CLI.hpp>

namespace rill::client {
namespace {

// Copies a value CLI11 parsed into an optional, only when the flag was given.
template <typename T>
void set_if_given(const CLI::Option* flag, const T& value, std::optional<T>& out) {
  if (flag->count() > 0) out = value;
}

}  // namespace

std::variant<ClientOptions, int> parse_options(int argc, char** argv) {
  CLI::App app{"rill-client: stream a completion or a chat from rill-server (gRPC or HTTP)"};
  ClientOptions o;
  std::string grpc_target, http_target, prompt, system, cache, model;
  int64_t max_tokens = 0;
  double temperature = 0, top_p = 0, min_p = 0, presence = 0, frequency = 0, repetition = 0;
  int32_t top_k = 0, priority = 0;
  uint64_t seed = 0;

  auto* grpc = app.add_option("--grpc", grpc_target, "rill-server's gRPC address, HOST:PORT");
  auto* http = app.add_option("--http", http_target, "rill-server's HTTP address, HOST:PORT");
  grpc->excludes(http);
  auto* prompt_flag =
      app.add_option("--prompt", prompt, "the prompt (with --chat: one user message)");
  app.add_flag("--chat", o.chat,
               "chat messages; without --prompt, interactive (one message a line of stdin)");
  auto* system_flag = app.add_option("--system", system, "a system message (with --chat)");
  app.add_flag("--json", o.json, "print one JSON object at the end instead of streaming text");
  auto* max_tokens_flag = app.add_option("--max-tokens", max_tokens, "tokens to generate at most");
  auto* temperature_flag = app.add_option("--temperature", temperature, "0: greedy");
  auto* top_p_flag = app.add_option("--top-p", top_p);
  auto* top_k_flag = app.add_option("--top-k", top_k);
  auto* min_p_flag = app.add_option("--min-p", min_p);
  auto* seed_flag = app.add_option("--seed", seed);
  auto* presence_flag = app.add_option("--presence-penalty", presence);
  auto* frequency_flag = app.add_option("--frequency-penalty", frequency);
  auto* repetition_flag = app.add_option("--repetition-penalty", repetition);
  app.add_option("--stop", o.stop, "a stop string (repeatable)")->allow_extra_args(false);
  app.add_flag("--ignore-eos", o.ignore_eos);
  auto* cache_flag = app.add_option("--cache", cache, "KV cache policy")
                         ->check(CLI::IsMember({"full", "streaming"}));
  app.add_option("--sink", o.sink, "attention sinks (--cache streaming)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "window tokens (--cache streaming)")
      ->check(CLI::NonNegativeNumber);
  auto* priority_flag = app.add_option("--priority", priority, "lower runs first");
  auto* model_flag =
      app.add_option("--model", model, "model name (HTTP; default: the first of GET /v1/models)");
  app.add_option("--timeout", o.timeout_s, "seconds for the whole request (0: none)")
      ->check(CLI::NonNegativeNumber);

  try {
    app.parse(argc, argv);
    if (grpc->count() + http->count() != 1)
      throw CLI::ValidationError("--grpc/--http",
                                 "exactly one of --grpc HOST:PORT or --http HOST:PORT is required");
    if (prompt_flag->count() == 0 && !o.chat)
      throw CLI::ValidationError("--prompt", "--prompt TEXT or --chat is required");
    if (system_flag->count() > 0 && !o.chat)
      throw CLI::ValidationError("--system", "--system needs --chat");
    o.use_grpc = grpc->count() > 0;
    o.target = o.use_grpc ? grpc_target : http_target;
    split_host_port(o.target);  // validates the form
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(ExitCode::kBadFlags);
  } catch (const std::exception& e) {
    std::cerr << "rill-client: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kBadFlags);
  }

  set_if_given(prompt_flag, prompt, o.prompt);
  set_if_given(system_flag, system, o.system);
  set_if_given(max_tokens_flag, max_tokens, o.max_tokens);
  set_if_given(temperature_flag, temperature, o.temperature);
  set_if_given(top_p_flag, top_p, o.top_p);
  set_if_given(top_k_flag, top_k, o.top_k);
  set_if_given(min_p_flag, min_p, o.min_p);
  set_if_given(seed_flag, seed, o.seed);
  set_if_given(presence_flag, presence, o.presence_penalty);
  set_if_given(frequency_flag, frequency, o.frequency_penalty);
  set_if_given(repetition_flag, repetition, o.repetition_penalty);
  set_if_given(cache_flag, cache, o.cache);
  set_if_given(priority_flag, priority, o.priority);
  set_if_given(model_flag, model, o.model);
  return o;
}

}  // namespace rill::client
