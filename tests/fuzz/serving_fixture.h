// What the request fuzzers share: the shipped default model (models/rill-shakespeare) loaded
// into a CPU serving engine behind a ServingContext, as rill-server serves it, plus one open
// session so "session_id" inputs reach turn planning. Nothing is ever submitted: the harnesses
// stop where the front ends would call ServingEngine::submit, after the engine's own checks
// (validate_request / validate_session_options).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/kv/kv_cache_manager.h"
#include "engine/model/model.h"
#include "engine/serving/metrics_registry.h"
#include "engine/serving/request.h"
#include "engine/serving/serving_engine.h"
#include "engine/serving/session.h"
#include "server/serving_context.h"

namespace rill::fuzz {

/// The session every fuzzer may name ("session_id": "s"): streaming, 4 sinks + 64 window.
inline constexpr const char* kSessionId = "s";

class ServingFixture {
 public:
  /// Loaded once per process (on first use), never freed: a harness's inputs share it.
  static ServingFixture& get();

  server::ServingContext& ctx() { return *ctx_; }
  /// The checks ServingEngine::submit and create_session run first (kInvalidArgument).
  void validate(const Request& r) const;
  void validate(const SessionOptions& o) const;

 private:
  ServingFixture();

  std::unique_ptr<Model> model_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<ServingEngine> engine_;
  const KvCacheManager* kv_ = nullptr;  // the engine's runner's
  std::unique_ptr<server::ServingContext> ctx_;
};

/// Runs `f` as a front end does: an exception becomes an error answer (server::map_exception,
/// then the HTTP error body). Bad input must get a 4xx answer, so an exception that maps to 500
/// (an internal error: a library exception escaping the checks, a bug) aborts with its message,
/// and libFuzzer keeps the input.
void as_front_end(const std::function<void()>& f);

}  // namespace rill::fuzz
