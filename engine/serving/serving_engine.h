// The serving engine: the API the gRPC and HTTP front ends call. It owns a model runner and the
// loop thread that drives it (continuous batching: each step carries every running sequence's
// decode token plus prefill chunks of waiting ones, two steps in flight), and a detokenizer
// thread that turns sampled tokens into text, matches stop strings and delivers events. It
// knows nothing of protobuf or HTTP.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/model/model_config.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/serving/engine_stats.h"
#include "engine/serving/metrics_registry.h"
#include "engine/serving/request.h"
#include "engine/serving/request_handle.h"
#include "engine/serving/session.h"
#include "engine/tokenizer/tokenizer.h"

namespace rill {

class ModelRunner;  // engine/runner/runner.h: front ends never need the runner interface

class ServingEngine {
 public:
  /// Starts the loop threads. `metrics` receives the engine's metrics (engine_metrics.cc).
  ServingEngine(std::unique_ptr<ModelRunner> runner, Tokenizer tokenizer, SchedulerConfig config,
                MetricsRegistry& metrics);
  ~ServingEngine();  // cancels what is left (final events delivered), stops the threads
  ServingEngine(const ServingEngine&) = delete;
  ServingEngine& operator=(const ServingEngine&) = delete;

  /// Queues a request and returns at once. Throws kInvalidArgument for a request that can never
  /// run (empty prompt, token ids out of range, bad sampling values, max_tokens < 0, logprobs
  /// over 20, a prompt over the context of a `full` cache, a streaming policy over the limits:
  /// the message names the limit), OverloadedError when the queue is full, kUnavailable while
  /// draining. `notify` (may be empty) runs on an engine thread
  /// whenever events are ready for the handle.
  RequestHandle submit(Request request, EventNotifier notify = {});
  /// Compiles a structured-output constraint against the model's vocabulary (cached; submit
  /// compiles the request's constraint the same way, so a front end that checks first pays once).
  /// Throws kInvalidArgument naming the problem: an invalid or unsupported spec, a forced token
  /// outside the vocabulary, a limit or the compile time-out (GrammarLimits) exceeded.
  void check_constraint(const OutputConstraint& constraint);
  /// Cancels the live request `id` of `scope` (Request::id_scope), or with an unscoped
  /// (unguessable, assigned) id, from any scope; false when no such live request exists.
  bool cancel(const std::string& id, const std::string& scope = {});

  /// Creates a session whose turns are submitted with Request::session_id. Throws
  /// kInvalidArgument for a policy that is not streaming or over the limits, an id in use or over
  /// kMaxIdBytes;
  /// kResourceExhausted at SchedulerConfig::max_sessions; kUnavailable while draining.
  /// A turn submitted while the session's previous turn runs is refused (kFailedPrecondition);
  /// one for an unknown or expired session gets kNotFound (the message says "expired" and why).
  SessionInfo create_session(SessionOptions options);
  /// The session's state now; kNotFound as for a turn.
  SessionInfo session_info(const std::string& id) const;
  /// Ends a session: cancels its running turn and frees its cache (GPU or host). False when no
  /// live session has the id, or with `incarnation` (SessionInfo; 0: any) when the session that
  /// has it now is another one (created after that one was closed).
  bool close_session(const std::string& id, uint64_t incarnation = 0);

  EngineStats stats() const;
  /// Stops admitting requests (submit refuses), waits up to `timeout` for the running and queued
  /// ones to finish, then cancels the rest. Returns true when everything finished in time.
  bool drain(std::chrono::milliseconds timeout);

  const ModelConfig& model_config() const;
  const Tokenizer& tokenizer() const;
  const SchedulerConfig& config() const;
  std::string runner_name() const;
  int kv_block_size() const;
  int kv_blocks_total() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill
