#include "tests/fuzz/serving_fixture.h"

#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "engine/model/dtype.h"
#include "engine/runner_factory.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/serving/request_validation.h"
#include "server/chat_prompt.h"
#include "server/error_mapping.h"
#include "server/openai_api.h"
#include "server/sampling_json.h"
#include "server/server_config.h"
#include "server/session_turn.h"

namespace rill::fuzz {

ServingFixture& ServingFixture::get() {
  static ServingFixture* fixture = new ServingFixture();  // reachable: not a leak
  return *fixture;
}

ServingFixture::ServingFixture() {
  spdlog::set_level(spdlog::level::warn);
  server::ServerConfig config;
  config.model = std::string(RILL_SOURCE_DIR) + "/models/rill-shakespeare";
  config.served_model_name = "rill-shakespeare";
  config.access_log = false;
  // Small, so that fuzz-sized inputs reach the 413 path too.
  config.max_body_bytes = 4096;
  // One CPU thread and a small pool: the harnesses never run a step, and every process of a
  // parallel fuzzing run holds its own.
  config.engine.device = "cpu";
  config.engine.cpu_threads = 1;
  config.engine.cpu_kv_cache_bytes = 16ll << 20;
  config.engine.host_kv_cache_bytes = 0;
  model_ = std::make_unique<Model>(load_model(config.model));
  std::unique_ptr<ModelRunner> runner = make_runner(*model_, config.engine);
  kv_ = &runner->kv();
  server::apply_scheduler_defaults(config, scheduler_defaults(runner->name()));
  const std::vector<int> stops = model_->stop_token_ids();
  config.scheduler.eos_token_ids.assign(stops.begin(), stops.end());
  metrics_ =
      std::make_unique<MetricsRegistry>(MetricLabels{{"model_name", config.served_model_name}});
  engine_ = std::make_unique<ServingEngine>(std::move(runner), *model_->tokenizer, config.scheduler,
                                            *metrics_);
  server::ModelInfo info;  // as rill-server's main.cc describes the model
  info.served_name = config.served_model_name;
  info.architecture = model_->config.architecture;
  info.dtype = dtype_name(model_->config.stored_dtype);
  info.context_length = model_->config.max_position_embeddings;
  info.vocab_size = model_->tokenizer->vocab_size();
  info.eos_token_ids = stops;
  info.sampling_defaults = server::server_sampling_defaults(
      config.generation_config, config.default_sampling, model_->generation);
  ctx_ = std::make_unique<server::ServingContext>(config);
  ctx_->set_engine(engine_.get(), info, server::make_chat_renderer(*model_));
  SessionOptions session;
  session.id = kSessionId;
  session.cache = CachePolicy::streaming(4, 64);
  server::create_session(*ctx_, session);
}

void ServingFixture::validate(const Request& r) const {
  validate_request(r, engine_->model_config(), *kv_, engine_->kv_blocks_total(), engine_->config());
}

void ServingFixture::validate(const SessionOptions& o) const {
  validate_session_options(o, *kv_, engine_->kv_blocks_total(), engine_->config());
}

void as_front_end(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    const server::ErrorReply reply = server::map_exception(e);
    const std::string body = server::error_body(reply);
    if (reply.http_status == 500) {
      std::fprintf(stderr, "bad input answered 500 (an internal error): %s\n", body.c_str());
      std::abort();
    }
  }
}

}  // namespace rill::fuzz
