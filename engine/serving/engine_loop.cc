#include "engine/serving/engine_loop.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace rill {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
constexpr auto kRateWindow = std::chrono::seconds(5);
constexpr auto kCostModelLogEvery = std::chrono::seconds(30);

}  // namespace

EngineLoop::EngineLoop(ModelRunner& runner, const SchedulerConfig& config, EngineMetrics& metrics,
                       OutputProcessor& output, SessionTable& sessions)
    : runner_(runner),
      config_(config),
      metrics_(metrics),
      output_(output),
      sessions_(runner, config, metrics, sessions),
      plan_host_(runner, sessions_),
      policy_(make_scheduling_policy(config)),
      planner_(plan_host_, config, *policy_),
      thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
  stop("engine shut down");
}

void EngineLoop::enqueue(SequencePtr seq) {
  {
    std::lock_guard lock(mu_);
    if (pending_.fetch_add(1) == 0)
      last_step_ns_.store(to_ns(Clock::now()));  // progress clock restarts
    inbox_.push_back(std::move(seq));
  }
  cv_.notify_one();
}

void EngineLoop::stop_string_matched(SequencePtr seq) {
  {
    std::lock_guard lock(mu_);
    stopped_.push_back(std::move(seq));
  }
  cv_.notify_one();
}

void EngineLoop::wake() {
  cv_.notify_one();
}

void EngineLoop::stop(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
    stop_message_ = message;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::finish(const SequencePtr& s, FinishReason reason,
                        std::optional<int32_t> stop_token, ErrorCode code, std::string message) {
  if (s->phase == SeqPhase::kFinished) return;
  if (s->session)
    sessions_.turn_ended(*s, reason,
                         Clock::now());  // the session keeps (or frees) the runner sequence
  else if (s->runner_id >= 0)
    runner_.remove_sequence(s->runner_id);
  s->runner_id = -1;
  s->phase = SeqPhase::kFinished;
  pending_.fetch_sub(1);
  recent_finishes_.push_back(Clock::now());
  if (!s->finalized.load())
    batch_.finishes.push_back({s, reason, stop_token, code, std::move(message)});
}

void EngineLoop::take_inbox(std::vector<SequencePtr>& stopped) {
  std::vector<SequencePtr> fresh;
  {
    std::unique_lock lock(mu_);
    fresh.swap(inbox_);
    stopped.swap(stopped_);
  }
  for (SequencePtr& s : fresh) {
    if (s->request.max_tokens == 0) {
      finish(s, FinishReason::kLength);
      continue;
    }
    if (s->compiled) {
      s->constraint = std::make_unique<ConstraintState>(s->compiled, s->request.constraint->forced_tokens);
      if (constraint_ended(s, s->constraint->status())) continue;
    }
    // Auto TTFT target: kAutoTtftFactor x the TTFT it would get unqueued beside the streams now.
    if (s->ttft_target.kind == LatencyTarget::Kind::kAuto)
      s->auto_ttft_target_s.store(
          kAutoTtftFactor *
          planner_.unqueued_ttft_s(s->geometry, static_cast<int64_t>(s->request.prompt.size())));
    waiting_.push_back(std::move(s));
  }
}

// Cancellations (from the client, a vanished or too slow consumer), deadlines, queue timeouts.
void EngineLoop::expire(Clock::time_point now) {
  auto check = [&](const SequencePtr& s) {
    if (s->phase == SeqPhase::kFinished) return;
    const Request& r = s->request;
    if (s->channel->cancel_requested()) {
      finish(s, FinishReason::kCancelled, std::nullopt, ErrorCode::kCancelled,
             s->channel->cancel_reason());
    } else if (r.deadline && now >= *r.deadline) {
      finish(s, FinishReason::kDeadline, std::nullopt, ErrorCode::kDeadlineExceeded,
             "request deadline exceeded");
    } else if (s->phase == SeqPhase::kWaiting && s->queue_s.load() < 0 &&
               now >= s->queue_deadline) {
      finish(s, FinishReason::kDeadline, std::nullopt, ErrorCode::kDeadlineExceeded,
             "queue timeout: not scheduled within " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    s->queue_deadline - s->arrival)
                                    .count()) +
                 " ms");
    }
  };
  for (const SequencePtr& s : running_) check(s);
  for (const SequencePtr& s : waiting_) check(s);
}

void EngineLoop::apply(const StepDecisions& d) {
  preemptions_ += static_cast<int64_t>(d.preempted.size());
  for (const StepDecisions::Failure& f : d.failed)
    finish(f.seq, FinishReason::kError, std::nullopt, f.error.code(), f.error.what());
}

void EngineLoop::launch(PlannedStep& step) {
  // Constrained rows sample under their grammar masks: the matcher's mask when it has seen every
  // sample; else (its previous sample is in the step in flight, this input is kLastSampled) the
  // mask comes late, from supply_late_masks once that step is finished and the matcher advanced.
  // Only the sampling waits for it: the forward pass runs meanwhile.
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const Sequence& s = *step.seqs[k];
    if (!step.inputs[k].sample || !s.constraint) continue;
    if (s.samples_in_flight > 0)
      step.inputs[k].mask_later = true;
    else
      step.inputs[k].mask = s.constraint->mask();
  }
  const auto launch_start = Clock::now();
  try {
    runner_.launch(step.inputs);
  } catch (const Error& e) {
    spdlog::error("engine step of {} sequences failed to launch: {}", step.inputs.size(), e.what());
    for (const SequencePtr& s : step.seqs)
      finish(s, FinishReason::kError, std::nullopt, e.code(),
             std::string("step failed: ") + e.what());
    return;
  }
  InFlight f;
  f.composition = step.composition;
  f.launch_ms = std::chrono::duration<double, std::milli>(Clock::now() - launch_start).count();
  if (step.steady_s >
      0)  // auto TPOT targets: kAutoTpotFactor x the mean steady step they decoded in
    for (int k = 0; k < step.decodes; ++k) {
      Sequence& s = *step.seqs[k];
      s.steady_sum_s += step.steady_s;
      ++s.steady_steps;
      s.auto_tpot_target_s.store(kAutoTpotFactor * s.steady_sum_s / s.steady_steps);
    }
  for (const SequencePtr& s : running_) s->sampled_in_last_launch = false;
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const StepInput& in = step.inputs[k];
    f.seqs.push_back(step.seqs[k]);
    f.runner_ids.push_back(in.id);
    f.sampled.push_back(in.sample);
    f.late.push_back(in.mask_later);
    f.masks_due = f.masks_due || in.mask_later;
    f.tokens += static_cast<int>(in.tokens.size());
    if (in.sample) {
      step.seqs[k]->sampled_in_last_launch = true;
      ++step.seqs[k]->samples_in_flight;
    }
    if (step.seqs[k]->session) ++step.seqs[k]->session->steps_in_flight;
  }
  metrics_.batch_size.observe(static_cast<double>(step.inputs.size()));
  in_flight_.push_back(std::move(f));
}

// Finishes the oldest step in flight and turns its samples into tokens and finish decisions.
void EngineLoop::finish_oldest() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  StepOutput out;
  try {
    out = runner_.finish();
  } catch (const Error& e) {
    spdlog::critical("engine step failed: {}; failing every request", e.what());
    fail_all(std::string("engine step failed: ") + e.what());
    return;
  }
  const auto now = Clock::now();
  last_step_ns_.store(to_ns(now));
  ++steps_;
  device_busy_s_ += runner_.last_step_device_ms() * 1e-3;
  learn_step_cost(f.composition, f.launch_ms);
  int sampled = 0;
  for (const SequencePtr& s : f.seqs)
    if (s->session) --s->session->steps_in_flight;
  const std::vector<ConstraintState::Next> constrained = advance_constraints(f, out);
  for (size_t k = 0; k < f.seqs.size(); ++k) {
    const SequencePtr& s = f.seqs[k];
    if (!live_sample(f, k)) continue;  // stale
    --s->samples_in_flight;
    const Request& r = s->request;
    const int32_t tok = out.sampled[k];
    s->last_sample = tok;
    ++sampled;
    if (ends_at_stop_id(*s, tok)) {
      finish(s, FinishReason::kStop, tok);
      continue;
    }
    // The constraint's next state (and its mask) before the token is streamed: a token it
    // refuses means the sampler ignored the mask, and is never delivered.
    const ConstraintState::Next next = constrained[k];
    if (next == ConstraintState::Next::kRejected) {
      finish(s, FinishReason::kError, std::nullopt, ErrorCode::kInternal,
             "sampled token " + std::to_string(tok) + " is outside the constraint's mask");
      continue;
    }
    s->generated.push_back(tok);
    if (!s->first_sample_at) s->first_sample_at = now;
    std::optional<SampleLogprobs> lp;
    if (r.logprobs >= 0 && k < out.logprobs.size()) lp = std::move(out.logprobs[k]);
    batch_.tokens.push_back({s, tok, std::move(lp), now});
    if (s->constraint) {
      metrics_.grammar_mask_time.observe(s->constraint->last_mask_us() * 1e-6);
      if (constraint_ended(s, next)) continue;
    }
    if (static_cast<int>(s->generated.size()) >= r.max_tokens) finish(s, FinishReason::kLength);
  }
  for (const SequencePtr& s : running_)
    if (s->phase == SeqPhase::kRunning && s->at_context_limit && s->samples_in_flight == 0)
      finish(s, FinishReason::kLength);
  supply_late_masks();
  recent_steps_.emplace_back(now, sampled);
  while (!recent_steps_.empty() && now - recent_steps_.front().first > kRateWindow)
    recent_steps_.pop_front();
}

// Rows whose sequence ended with the step just finished, or is no longer the runner sequence
// they were launched for, get no mask: the runner samples them unconstrained and live_sample
// drops what they sample.
void EngineLoop::supply_late_masks() {
  if (in_flight_.empty() || !in_flight_.back().masks_due) return;
  InFlight& f = in_flight_.back();
  std::vector<LateMask> masks;
  for (size_t k = 0; k < f.seqs.size(); ++k)
    if (f.late[k] && live_sample(f, k))
      masks.push_back({f.runner_ids[k], f.seqs[k]->constraint->mask()});
  try {
    runner_.supply_masks(masks);
    f.masks_due = false;
  } catch (const Error& e) {  // still due: fail_all releases them before draining the runner
    spdlog::critical("engine step failed: {}; failing every request", e.what());
    fail_all(std::string("engine step failed: ") + e.what());
  }
}

void EngineLoop::release_late_masks() {
  if (in_flight_.empty() || !in_flight_.back().masks_due) return;
  in_flight_.back().masks_due = false;
  try {
    runner_.supply_masks({});
  } catch (const Error& e) {
    spdlog::error("engine step's late masks failed: {}", e.what());
  }
}

bool EngineLoop::live_sample(const InFlight& f, size_t k) const {
  const Sequence& s = *f.seqs[k];
  return f.sampled[k] && s.phase == SeqPhase::kRunning && s.runner_id == f.runner_ids[k];
}

// An EOS or stop id past min_tokens: the request ends "stop" with it (not streamed).
bool EngineLoop::ends_at_stop_id(const Sequence& s, int32_t tok) {
  const Request& r = s.request;
  const bool stop_id = std::find(s.eos_ids.begin(), s.eos_ids.end(), tok) != s.eos_ids.end() ||
                       std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tok) != r.stop_token_ids.end();
  return stop_id && static_cast<int>(s.generated.size()) >= r.min_tokens;
}

// Advances the constrained sequences of a finished step by their sampled tokens, computing their
// next masks, on several threads when there are several (each sequence's matcher is its own; the
// compiled constraints are immutable). Per input: the outcome (kContinue for the others).
std::vector<ConstraintState::Next> EngineLoop::advance_constraints(const InFlight& f, const StepOutput& out) {
  std::vector<ConstraintState::Next> next(f.seqs.size(), ConstraintState::Next::kContinue);
  std::vector<size_t> work;
  for (size_t k = 0; k < f.seqs.size(); ++k)
    if (f.seqs[k]->constraint && live_sample(f, k) && !ends_at_stop_id(*f.seqs[k], out.sampled[k])) work.push_back(k);
  auto advance = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const size_t k = work[static_cast<size_t>(i)];
      next[k] = f.seqs[k]->constraint->advance(out.sampled[k]);
    }
  };
  if (work.size() < 2) {
    advance(0, static_cast<int64_t>(work.size()));
    return next;
  }
  if (!mask_pool_)  // first used: most steps of a server without constrained requests never are
    mask_pool_ = std::make_unique<ThreadPool>(
        static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  mask_pool_->parallel_for(static_cast<int64_t>(work.size()), advance);
  return next;
}

// A constrained sequence whose grammar is complete (nothing but EOS may follow) ends "stop";
// one whose parser can go nowhere ends with an error. True when it ended.
bool EngineLoop::constraint_ended(const SequencePtr& s, ConstraintState::Next next) {
  if (next == ConstraintState::Next::kComplete) {
    finish(s, FinishReason::kStop);
    return true;
  }
  if (next == ConstraintState::Next::kStuck) {
    finish(s, FinishReason::kError, std::nullopt, ErrorCode::kResourceExhausted,
           "constrained decoding: no token can continue the output (the grammar parser's state "
           "exceeded its limit of items per byte)");
    return true;
  }
  return false;
}

void EngineLoop::learn_step_cost(const StepComposition& c, double launch_ms) {
  const double device_ms = runner_.last_step_device_ms();
  if (device_ms <= 0) return;  // the runner does not time its steps
  if (spdlog::should_log(spdlog::level::trace))  // the prediction only when it is logged
    spdlog::trace("step: {} decode rows ({} keys), {} chunks of {} prompt tokens ({} keys): "
                  "{:.3f} ms, predicted {:.3f} ms, launched in {:.3f} ms", c.decode_rows,
                  c.decode_keys, c.chunks, c.prefill_tokens, c.prefill_keys, device_ms,
                  planner_.cost_model().predict(c) * 1e3, launch_ms);
  planner_.observe(c, device_ms * 1e-3);
  const StepCostModel& m = planner_.cost_model();
  const auto now = Clock::now();
  if (m.trusted() && !cost_model_trusted_) {
    cost_model_trusted_ = true;
    cost_model_logged_ = now;
    spdlog::info("{}", m.describe());
  } else if (now - cost_model_logged_ > kCostModelLogEvery) {
    cost_model_logged_ = now;
    spdlog::debug("{}", m.describe());
  }
}

void EngineLoop::fail_all(const std::string& message) {
  for (const SequencePtr& s : running_)
    finish(s, FinishReason::kError, std::nullopt, ErrorCode::kInternal, message);
  for (const SequencePtr& s : waiting_)
    finish(s, FinishReason::kError, std::nullopt, ErrorCode::kInternal, message);
  release_late_masks();
  while (!in_flight_.empty()) {  // the runner may still hold them
    in_flight_.pop_front();
    try {
      runner_.finish();
    } catch (const Error&) {
    }
  }
}

void EngineLoop::flush_output() {
  if (batch_.empty()) return;
  output_.push(std::move(batch_));
  batch_ = {};
}

void EngineLoop::publish_stats(Clock::time_point now) {
  const KvStats kv = runner_.kv().stats();
  int64_t waiting_tokens = 0;
  for (const SequencePtr& s : waiting_)
    waiting_tokens += static_cast<int64_t>(s->request.prompt.size());
  std::lock_guard lock(mu_);
  const int64_t new_preemptions = preemptions_ - stats_.preemptions;
  if (new_preemptions > 0) metrics_.preemptions.add(static_cast<double>(new_preemptions));
  publish_prefix_cache(kv);
  stats_.running = static_cast<int>(running_.size());
  stats_.waiting = static_cast<int>(waiting_.size() + inbox_.size());
  stats_.waiting_prompt_tokens = waiting_tokens;
  stats_.kv_blocks_total = kv.blocks_total;
  stats_.kv_blocks_used = kv.blocks_used;
  stats_.kv_blocks_free = kv.blocks_free;
  stats_.kv_blocks_cached = kv.blocks_cached;
  stats_.kv_usage = kv.blocks_total ? static_cast<double>(kv.blocks_used) / kv.blocks_total : 0;
  stats_.preemptions = preemptions_;
  stats_.steps = steps_;
  stats_.device_busy_s = device_busy_s_;
  stats_.step_cost_trusted = planner_.cost_model().trusted();
  stats_.ttft_overrides = planner_.ttft_overrides();
  stats_.overloaded_steps = planner_.overloaded_steps();
  double span = recent_steps_.empty() ? 0 : seconds(recent_steps_.front().first, now);
  int tokens = 0;
  for (const auto& [t, n] : recent_steps_) tokens += n;
  stats_.steps_per_s = span > 0 ? (recent_steps_.size() - 1) / span : 0;
  stats_.generation_tokens_per_s = span > 0 ? tokens / span : 0;
  while (!recent_finishes_.empty() && now - recent_finishes_.front() > kRateWindow)
    recent_finishes_.pop_front();
  const double finish_span = recent_finishes_.empty() ? 0 : seconds(recent_finishes_.front(), now);
  stats_.finished_per_s = recent_finishes_.size() / std::max(finish_span, 1.0);
  metrics_.requests_running.set(stats_.running);
  metrics_.requests_waiting.set(stats_.waiting);
  metrics_.kv_cache_usage.set(stats_.kv_usage);
}

// Counters advance by what changed since the last call (stats_ holds the totals; mu_ held).
void EngineLoop::publish_prefix_cache(const KvStats& kv) {
  const int64_t queries = planner_.prefix_queries(), hits = planner_.prefix_hits();
  if (queries > stats_.prefix_cache_queries)
    metrics_.prefix_cache_queries.add(static_cast<double>(queries - stats_.prefix_cache_queries));
  if (hits > stats_.prefix_cache_hits)
    metrics_.prefix_cache_hits.add(static_cast<double>(hits - stats_.prefix_cache_hits));
  if (kv.cache_evictions > prefix_cache_evictions_)
    metrics_.prefix_cache_evictions.add(
        static_cast<double>(kv.cache_evictions - prefix_cache_evictions_));
  prefix_cache_evictions_ = kv.cache_evictions;
  stats_.prefix_cache_queries = queries;
  stats_.prefix_cache_hits = hits;
  stats_.prefix_cache_hit_rate =
      queries > 0 ? static_cast<double>(hits) / static_cast<double>(queries) : 0;
  metrics_.prefix_cache_blocks.set(kv.blocks_cached);
}

EngineStats EngineLoop::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(mu_);
    s = stats_;
  }
  const double since = (to_ns(Clock::now()) - last_step_ns_.load()) * 1e-9;
  s.seconds_since_last_step = since;
  s.stalled =
      pending_.load() > 0 && since > std::chrono::duration<double>(config_.stall_timeout).count();
  return s;
}

void EngineLoop::run() {
  bool idle = false;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (idle && inbox_.empty() && stopped_.empty() && !stop_requested_)
        cv_.wait_for(lock, running_.empty() && waiting_.empty() ? std::chrono::milliseconds(100)
                                                                : std::chrono::milliseconds(5));
      if (stop_requested_) break;
    }
    std::vector<SequencePtr> stopped;
    take_inbox(stopped);
    for (const SequencePtr& s : stopped) finish(s, FinishReason::kStop);  // final event already out
    const auto now = Clock::now();
    expire(now);
    sessions_.maintain(now);
    std::erase_if(running_, [](const SequencePtr& s) { return s->phase == SeqPhase::kFinished; });
    std::erase_if(waiting_, [](const SequencePtr& s) { return s->phase == SeqPhase::kFinished; });
    policy_->order_waiting(waiting_, now);
    PlannedStep step = planner_.plan(running_, waiting_, now);
    apply(step.decisions);
    for (const SequencePtr& s : step.seqs)
      if (!s->counted) {
        s->counted = true;
        if (s->session) sessions_.turn_started(s->session);
        metrics_.request_queue_time.observe(s->queue_s.load());
        metrics_.prompt_tokens.add(static_cast<double>(s->request.prompt.size()));
      }
    if (!step.empty()) launch(step);
    if (in_flight_.size() >= static_cast<size_t>(ModelRunner::kMaxStepsInFlight) ||
        (step.empty() && !in_flight_.empty()))
      finish_oldest();
    std::erase_if(running_, [](const SequencePtr& s) { return s->phase == SeqPhase::kFinished; });
    idle = step.empty() && in_flight_.empty();
    publish_stats(Clock::now());
    flush_output();
  }
  // Shutdown: everything left is cancelled; steps in flight are waited for and dropped.
  std::string message;
  {
    std::lock_guard lock(mu_);
    message = stop_message_;
  }
  std::vector<SequencePtr> stopped;
  take_inbox(stopped);
  for (const SequencePtr& s : stopped) finish(s, FinishReason::kStop);
  for (const SequencePtr& s : running_)
    finish(s, FinishReason::kCancelled, std::nullopt, ErrorCode::kCancelled, message);
  for (const SequencePtr& s : waiting_)
    finish(s, FinishReason::kCancelled, std::nullopt, ErrorCode::kCancelled, message);
  release_late_masks();
  while (!in_flight_.empty()) {
    in_flight_.pop_front();
    try {
      runner_.finish();
    } catch (const Error& e) {
      spdlog::error("engine step failed during shutdown: {}", e.what());
    }
  }
  running_.clear();
  waiting_.clear();
  sessions_.clear();
  flush_output();
}

}  // namespace rill
