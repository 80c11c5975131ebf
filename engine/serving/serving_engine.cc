#include "engine/serving/serving_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/scheduler/latency_targets.h"
#include "engine/serving/engine_loop.h"
#include "engine/serving/engine_metrics.h"
#include "engine/serving/ids.h"
#include "engine/serving/output_processor.h"
#include "engine/serving/request_validation.h"
#include "engine/serving/session_table.h"

namespace rill {

namespace {

// The key of a live request: its id within its scope (Request::id_scope), length-prefixed so
// that no (scope, id) pair spells another.
std::string live_key(const std::string& scope, const std::string& id) {
  return std::to_string(scope.size()) + ":" + scope + id;
}

}  // namespace

class ServingEngine::Impl {
 public:
  Impl(std::unique_ptr<ModelRunner> runner, Tokenizer tokenizer, SchedulerConfig config,
       MetricsRegistry& registry)
      : runner_(std::move(runner)),
        tokenizer_(std::move(tokenizer)),
        config_(std::move(config)),
        metrics_(registry),
        kv_blocks_total_(runner_->kv().num_blocks()),
        sessions_(config_.max_sessions) {
    validate_scheduler_config(config_);
    if (config_.max_num_seqs > runner_->max_step_sequences())
      throw Error(ErrorCode::kInvalidArgument,
                  "scheduler: max_num_seqs " + std::to_string(config_.max_num_seqs) +
                      " exceeds the " + runner_->name() + " runner's " +
                      std::to_string(runner_->max_step_sequences()) +
                      " sequences per step (raise the runner's max_batch or lower max_num_seqs)");
    if (config_.max_num_batched_tokens > runner_->max_step_tokens())
      throw Error(ErrorCode::kInvalidArgument,
                  "scheduler: max_num_batched_tokens " +
                      std::to_string(config_.max_num_batched_tokens) + " exceeds the " +
                      runner_->name() + " runner's " + std::to_string(runner_->max_step_tokens()) +
                      " tokens per step (raise the runner's max_step_tokens or lower "
                      "max_num_batched_tokens)");
    eos_ids_ = config_.eos_token_ids;
    if (eos_ids_.empty() && tokenizer_.eos_id()) eos_ids_.push_back(*tokenizer_.eos_id());
    output_ = std::make_unique<OutputProcessor>(
        tokenizer_, metrics_, [this](const SequencePtr& s) { loop_->stop_string_matched(s); },
        [this](const SequencePtr& s) { forget(s->request); });
    loop_ = std::make_unique<EngineLoop>(*runner_, config_, metrics_, *output_, sessions_);
    // A large vocabulary's JSON building blocks take a second or more of table walks: built
    // in the background at load (ConstraintCache::warm_up) so that no request pays for them.
    // A small one (the default model's 4k) compiles a cold schema within the target anyway.
    if (runner_->config().vocab_size >= kWarmUpVocabulary)
      warm_up_ = std::thread([this] {
        try {
          constraint_cache().warm_up(&stop_warm_up_);
        } catch (...) {  // a failed warm-up costs only speed: requests compile what they need
        }
      });
  }

  ~Impl() {
    stop_warm_up_.store(true);
    if (warm_up_.joinable()) warm_up_.join();
    loop_->stop("server shutting down");  // final events of everything left go to the output thread
    output_.reset();  // delivers them, then stops; it tells the loop of stop strings until then
    loop_.reset();    // so the loop (its thread already joined) goes last
  }

  RequestHandle submit(Request r, EventNotifier notify) {
    if (draining_.load()) {
      metrics_.requests_rejected("draining").add();
      throw Error(ErrorCode::kUnavailable, "server is draining: not accepting new requests");
    }
    if (r.id.empty()) {
      r.id = random_id("req-");
      r.id_scope.clear();
    }
    auto seq = std::make_shared<Sequence>();
    // The channel exists before a turn is published on its session: close_session cancels the
    // session's turn through it from any thread, even before the turn is queued.
    seq->channel =
        std::make_shared<RequestChannel>(r.id, std::move(notify), config_.max_buffered_chunks);
    std::shared_ptr<Sequence> previous_turn;
    if (!r.session_id.empty()) {
      seq->session = sessions_.begin_turn(r.session_id, r.session_incarnation, seq, previous_turn);
      r.cache = seq->session->options.cache;
    }
    try {
      return queue(std::move(r), seq);
    } catch (...) {
      if (seq && seq->session) sessions_.abandon_turn(seq->session, seq, previous_turn);
      throw;
    }
  }

  SessionInfo create_session(SessionOptions options) {
    if (draining_.load())
      throw Error(ErrorCode::kUnavailable, "server is draining: not accepting new sessions");
    validate_session_options(options, runner_->kv(), kv_blocks_total_, config_);
    const KvGeometry g = runner_->kv().geometry_for(options.cache);
    const SessionPtr s = sessions_.create(std::move(options), g, Clock::now());
    return sessions_.info(s->options.id, Clock::now());
  }

  SessionInfo session_info(const std::string& id) const { return sessions_.info(id, Clock::now()); }

  bool close_session(const std::string& id, uint64_t incarnation) {
    const SessionPtr s = sessions_.close(id, incarnation);
    if (!s) return false;
    std::shared_ptr<Sequence> turn;
    {
      std::lock_guard lock(sessions_.mutex());
      if (turn_running(*s)) turn = s->turn;
    }
    if (turn) turn->channel->cancel("session closed");
    loop_->wake();
    return true;
  }

  bool cancel(const std::string& id, const std::string& scope) {
    std::shared_ptr<RequestChannel> ch;
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(live_key(scope, id));
      if (it == live_.end() && !scope.empty()) it = live_.find(live_key({}, id));
      if (it == live_.end()) return false;
      ch = it->second;
    }
    ch->cancel("cancelled by the client");
    loop_->wake();
    return true;
  }

  EngineStats stats() const {
    EngineStats s = loop_->stats();
    s.draining = draining_.load();
    return s;
  }

  bool drain(std::chrono::milliseconds timeout) {
    draining_.store(true);
    const auto until = Clock::now() + timeout;
    while (loop_->pending() > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (loop_->pending() == 0) return true;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, ch] : live_) ch->cancel("server shutting down: drain timeout");
    }
    loop_->wake();
    const auto grace = Clock::now() + std::chrono::seconds(10);
    while (loop_->pending() > 0 && Clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return false;
  }

  std::unique_ptr<ModelRunner> runner_;
  Tokenizer tokenizer_;
  SchedulerConfig config_;

  // Compiles a request's constraint against the model's vocabulary (cached: a spec seen before
  // costs a lookup). Runs on the calling thread, bounded by GrammarLimits::compile_timeout.
  std::shared_ptr<const grammar::CompiledConstraint> compile(const OutputConstraint& c) {
    for (int32_t t : c.forced_tokens)
      if (t < 0 || t >= runner_->config().vocab_size)
        throw Error(ErrorCode::kInvalidArgument,
                    "constraint: forced token id " + std::to_string(t) + " outside the vocabulary");
    return constraint_cache().get(c.spec);
  }

  // The engine's constraint cache, built on first use (decoding a large vocabulary takes a
  // moment), by the load-time warm-up or the first constrained request.
  grammar::ConstraintCache& constraint_cache() {
    std::lock_guard lock(cache_mu_);
    if (!constraints_) {
      auto vocab =
          grammar::Vocabulary::from_tokenizer(tokenizer_, runner_->config().vocab_size, eos_ids_);
      constraints_ =
          std::make_unique<grammar::ConstraintCache>(std::move(vocab), grammar::GrammarLimits{});
    }
    return *constraints_;
  }

 private:
  // Validates and queues a request (`seq` is fresh, its channel made and its session set for a
  // turn).
  RequestHandle queue(Request r, SequencePtr seq) {
    try {
      check_id_length(r.id, "request id");
      validate_request(r, runner_->config(), runner_->kv(), kv_blocks_total_, config_);
    } catch (const Error&) {
      metrics_.requests_rejected("invalid").add();
      throw;
    }
    if (r.constraint) {
      try {
        seq->compiled = compile(*r.constraint);
      } catch (const Error&) {
        metrics_.requests_rejected("invalid").add();
        throw;
      }
    }
    const EngineStats st = loop_->stats();
    const int64_t queued = loop_->pending() - st.running;
    if (queued >= config_.max_queued_requests ||
        st.waiting_prompt_tokens + static_cast<int64_t>(r.prompt.size()) >
            config_.max_queued_prompt_tokens) {
      metrics_.requests_rejected("queue_full").add();
      const double retry =
          std::clamp(std::ceil((queued + 1) / std::max(st.finished_per_s, 0.1)), 1.0, 60.0);
      throw OverloadedError("server overloaded: " + std::to_string(queued) +
                                " requests waiting (limit " +
                                std::to_string(config_.max_queued_requests) + ")",
                            retry);
    }
    const auto now = Clock::now();
    {
      std::lock_guard lock(mu_);
      const std::string key = live_key(r.id_scope, r.id);
      if (live_.count(key))
        throw Error(ErrorCode::kInvalidArgument, "request id " + r.id + " is already in use");
      live_.emplace(key, seq->channel);
      seq->order = next_order_++;
    }
    seq->arrival = now;
    seq->queue_deadline = deadline_after(now, r.queue_timeout.value_or(config_.queue_timeout));
    seq->ttft_target = resolve_target(r.ttft_target, config_.ttft_target);
    seq->tpot_target = resolve_target(r.tpot_target, config_.tpot_target);
    seq->order_deadline = deadline_after(
        now, ordering_slack(seq->ttft_target, r.queue_timeout.value_or(config_.queue_timeout)));
    if (!r.ignore_eos) seq->eos_ids = eos_ids_;
    seq->geometry = runner_->kv().geometry_for(r.cache);
    seq->request = std::move(r);
    RequestHandle handle(seq->channel);
    loop_->enqueue(std::move(seq));
    return handle;
  }

  void forget(const Request& r) {
    std::lock_guard lock(mu_);
    live_.erase(live_key(r.id_scope, r.id));
  }

  EngineMetrics metrics_;
  int kv_blocks_total_;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<OutputProcessor> output_;
  std::unique_ptr<EngineLoop> loop_;
  std::atomic<bool> draining_{false};
  std::mutex mu_;                                                          // live_, next_order_
  std::unordered_map<std::string, std::shared_ptr<RequestChannel>> live_;  // by live_key
  SessionTable sessions_;
  uint64_t next_order_ = 0;
  std::mutex cache_mu_;                                    // constraints_ creation
  std::unique_ptr<grammar::ConstraintCache> constraints_;  // compiled constraints (thread-safe)
  static constexpr int32_t kWarmUpVocabulary = 32768;      // warm the cache up from this size
  std::atomic<bool> stop_warm_up_{false};
  std::thread warm_up_;  // ConstraintCache::warm_up at load; joined first on destruction
};

ServingEngine::ServingEngine(std::unique_ptr<ModelRunner> runner, Tokenizer tokenizer,
                             SchedulerConfig config, MetricsRegistry& metrics)
    : impl_(std::make_unique<Impl>(std::move(runner), std::move(tokenizer), std::move(config),
                                   metrics)) {}

ServingEngine::~ServingEngine() = default;

RequestHandle ServingEngine::submit(Request request, EventNotifier notify) {
  return impl_->submit(std::move(request), std::move(notify));
}
void ServingEngine::check_constraint(const OutputConstraint& constraint) { impl_->compile(constraint); }
bool ServingEngine::cancel(const std::string& id, const std::string& scope) {
  return impl_->cancel(id, scope);
}
SessionInfo ServingEngine::create_session(SessionOptions options) {
  return impl_->create_session(std::move(options));
}
SessionInfo ServingEngine::session_info(const std::string& id) const {
  return impl_->session_info(id);
}
bool ServingEngine::close_session(const std::string& id, uint64_t incarnation) {
  return impl_->close_session(id, incarnation);
}
EngineStats ServingEngine::stats() const {
  return impl_->stats();
}
bool ServingEngine::drain(std::chrono::milliseconds timeout) {
  return impl_->drain(timeout);
}
const ModelConfig& ServingEngine::model_config() const {
  return impl_->runner_->config();
}
const Tokenizer& ServingEngine::tokenizer() const {
  return impl_->tokenizer_;
}
const SchedulerConfig& ServingEngine::config() const {
  return impl_->config_;
}
std::string ServingEngine::runner_name() const {
  return impl_->runner_->name();
}
int ServingEngine::kv_block_size() const {
  return impl_->runner_->kv().block_size();
}
int ServingEngine::kv_blocks_total() const {
  return impl_->runner_->kv().num_blocks();
}

}  // namespace rill
