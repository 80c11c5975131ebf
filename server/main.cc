// rill-server: loads a model into the serving engine and serves it over gRPC (rill.v1) and an
// OpenAI-compatible HTTP API. Configuration: --config FILE (configs/) and flags. SIGTERM /
// SIGINT: stop taking requests, finish in-flight ones up to the drain timeout, exit 0. Any
// start-up failure (configuration, listening, loading the model): a message naming the file or
// field on stderr and exit code 2.
#include <sys/resource.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "engine/model/dtype.h"
#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "engine/serving/serving_engine.h"
#include "server/grpc_service.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "server/sampling_json.h"
#include "server/server_config.h"
#include "server/serving_context.h"
#include "server/tool_calls.h"

using namespace rill;
using namespace rill::server;

namespace {

// SIGINT / SIGTERM are blocked in every thread and taken by one sigwait thread. The thread is
// detached and may outlive the waiter (a start-up error returns from main before it ever runs), so
// what it touches lives in a shared state it co-owns, never in the waiter's frame.
class SignalWaiter {
 public:
  SignalWaiter() : state_(std::make_shared<State>()) {
    sigemptyset(&state_->set);
    sigaddset(&state_->set, SIGINT);
    sigaddset(&state_->set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &state_->set, nullptr);  // before any other thread starts
    std::thread([state = state_] {
      int sig = 0;
      sigwait(&state->set, &sig);
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->signal = sig;
      }
      state->cv.notify_all();
    }).detach();
  }
  /// Waits up to `timeout`; the signal number once one arrived, else 0.
  int wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait_for(lock, timeout, [&] { return state_->signal != 0; });
    return state_->signal;
  }

 private:
  struct State {
    sigset_t set;
    std::mutex mu;
    std::condition_variable cv;
    int signal = 0;
  };
  std::shared_ptr<State> state_;
};

void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

std::string default_served_name(const std::string& model_path) {
  std::filesystem::path p(model_path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  if (name.ends_with(".bin")) name.resize(name.size() - 4);
  return name.empty() ? "rill" : name;
}

ModelInfo model_info(const Model& model, const std::string& served_name,
                     const std::string& quantization) {
  ModelInfo m;
  m.served_name = served_name;
  m.architecture = model.config.architecture;
  m.dtype = dtype_name(model.config.stored_dtype);
  m.quantization = describe_quantization(resolve_quantization(quantization, model.config.quant),
                                         model.config.quant);
  m.context_length = model.config.max_position_embeddings;
  m.vocab_size = model.tokenizer->vocab_size();
  m.eos_token_ids = model.stop_token_ids();
  return m;
}

// Every start-up failure: one line on stderr naming the file or field, exit code 2.
constexpr int kStartupError = 2;

int startup_error(const std::string& message) {
  std::fprintf(stderr, "rill-server: %s\n", message.c_str());
  return kStartupError;
}

// A machine-readable line on stdout (tests and scripts wait for them), written by the JSON
// library so that any name or host is escaped.
void print_event(const nlohmann::json& event) {
  const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The model and its engine. The scheduler fields that neither the file nor a flag set take the
// chosen runner's defaults (config is updated: the values in force).
struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<ServingEngine> engine;
  SamplingParams sampling;  // what requests start from (docs/api.md, "Sampling fields")
};

Loaded load_engine(ServerConfig& config, MetricsRegistry& metrics) {
  Loaded l;
  try {
    l.model = std::make_unique<Model>(load_model(config.model));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument,
                "model: cannot load " + config.model + ": " + e.what());
  }
  try {
    std::unique_ptr<ModelRunner> runner = make_runner(*l.model, config.engine);
    apply_scheduler_defaults(config, scheduler_defaults(runner->name()));
    spdlog::info("scheduler in force ({} runner): {}", runner->name(), scheduler_to_json(config));
    // Every id that ends generation: config, generation_config and tokenizer EOS (Llama-3's
    // <|eot_id|> is only in generation_config.json).
    const std::vector<int> stops = l.model->stop_token_ids();
    config.scheduler.eos_token_ids.assign(stops.begin(), stops.end());
    l.sampling = server_sampling_defaults(config.generation_config, config.default_sampling,
                                          l.model->generation);
    l.engine = std::make_unique<ServingEngine>(std::move(runner), *l.model->tokenizer,
                                               config.scheduler, metrics);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot start the engine for " + config.model + ": " + e.what());
  }
  return l;
}

// Stops taking requests, lets in-flight ones finish up to the drain timeout (cancelling the
// rest), then closes the front ends (dropping any handle left while the engine still runs)
// before the engine goes.
void drain_and_stop(double drain_timeout_s, ServingContext& ctx, std::unique_ptr<HttpServer>& http,
                    std::unique_ptr<GrpcServer>& grpc, std::unique_ptr<ServingEngine>& engine) {
  ctx.set_draining();
  grpc->update_health();
  http->stop_accepting();
  const bool clean =
      engine->drain(std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1e3)));
  if (!clean) spdlog::warn("drain timeout: the remaining requests were cancelled");
  // Let streams send their final events first.
  http->stop(2.0);
  grpc->shutdown(2.0);
  http.reset();
  grpc.reset();
  ctx.clear_engine();
  engine.reset();
}

}  // namespace

int main(int argc, char** argv) {
  SignalWaiter signals;
  ServerConfig config;
  try {
    if (!parse_command_line(argc, argv, config)) return 0;
    if (config.served_model_name.empty())
      config.served_model_name = default_served_name(config.model);
    validate_config(config);
  } catch (const std::exception& e) {
    return startup_error(std::string("invalid configuration: ") + e.what());
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  raise_fd_limit();
  // The scheduler fields left unset are decided with the runner: logged once it is chosen.
  spdlog::info("rill-server {} config {}", kRillVersion,
               config_to_json(config, /*unset_scheduler=*/false));

  MetricsRegistry metrics({{"model_name", config.served_model_name}});
  ServingContext ctx(config);
  // Listeners first (health answers 503 "loading" meanwhile).
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<GrpcServer> grpc;
  try {
    http = std::make_unique<HttpServer>(ctx, metrics, config.host, config.http_port,
                                        config.http_threads);
  } catch (const std::exception& e) {
    return startup_error(std::string("http_port: ") + e.what());
  }
  try {
    grpc = std::make_unique<GrpcServer>(ctx, config.host, config.grpc_port);
  } catch (const std::exception& e) {
    return startup_error(std::string("grpc_port: ") + e.what());
  }
  print_event({{"event", "listening"},
               {"host", config.host},
               {"http_port", http->port()},
               {"grpc_port", grpc->port()}});
  spdlog::info("listening: HTTP {}:{} (at most {} connections), gRPC {}:{}", config.host,
               http->port(), http->max_connections(), config.host, grpc->port());
  if (http->max_connections() < config.max_connections)
    spdlog::warn("max_connections {} lowered to {} to fit the descriptor limit (RLIMIT_NOFILE)",
                 config.max_connections, http->max_connections());

  Loaded loaded;
  try {
    loaded = load_engine(config, metrics);
  } catch (const std::exception& e) {
    return startup_error(e.what());
  }
  std::unique_ptr<Model> model = std::move(loaded.model);
  std::unique_ptr<ServingEngine> engine = std::move(loaded.engine);
  ModelInfo info = model_info(*model, config.served_model_name, config.engine.quantization);
  info.tensor_parallel_size = config.engine.tensor_parallel_size;
  info.sampling_defaults = loaded.sampling;
  spdlog::info("sampling defaults: {}", dump_json(sampling_json(loaded.sampling)));
  std::unique_ptr<ChatRenderer> chat = make_chat_renderer(*model);
  try {
    info.tool_family = resolve_tool_family(config.tool_call_parser, *chat, engine->tokenizer());
  } catch (const std::exception& e) {
    return startup_error(e.what());
  }
  ctx.set_engine(engine.get(), std::move(info), std::move(chat));
  grpc->update_health();
  spdlog::info(
      "serving {} as '{}' on {} ({} KV blocks of {} tokens; up to {} sequences, {} tokens per "
      "step)",
      config.model, config.served_model_name, engine->runner_name(), engine->kv_blocks_total(),
      engine->kv_block_size(), engine->config().max_num_seqs,
      engine->config().max_num_batched_tokens);
  print_event({{"event", "ready"}, {"model", config.served_model_name}});

  // Health follows the engine (stalled, draining) until a signal arrives.
  int sig = 0;
  while ((sig = signals.wait_for(std::chrono::milliseconds(500))) == 0) grpc->update_health();

  spdlog::info("signal {}: draining (up to {} s)", sig, config.drain_timeout_s);
  drain_and_stop(config.drain_timeout_s, ctx, http, grpc, engine);
  spdlog::info("stopped");
  return 0;
}
