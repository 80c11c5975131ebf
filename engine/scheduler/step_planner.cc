#include "engine/scheduler/step_planner.h"

#include <algorithm>
#include <cmath>

namespace rill {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

bool contains(const std::vector<SequencePtr>& v, const SequencePtr& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

StepPlanner::StepPlanner(PlanHost& host, const SchedulerConfig& config,
                         const SchedulingPolicy& policy)
    : host_(host), config_(config), policy_(policy), budget_(host.kv()) {}

// Free blocks (cached ones included: evicted when needed) minus those still owed to admitted
// streaming sequences (their whole life's worth, and copies of shared blocks their rings will
// overwrite) and those the step being planned already takes (appended only at launch).
int StepPlanner::free_blocks_for_growth() const {
  const KvCacheManager& kv = host_.kv();
  return kv.num_free_blocks() - kv.cow_reserve() - promised_ - budget_.sums().reserved;
}

// Blocks running `full` sequences still need to finish feeding their prefill (beyond this step).
int StepPlanner::owed_prefill_blocks() const {
  return budget_.sums().owed;
}

void StepPlanner::preempt(const SequencePtr& s, std::vector<SequencePtr>& waiting,
                          StepDecisions& d) {
  budget_.remove(*s);
  host_.remove_sequence(s->runner_id);
  s->runner_id = -1;
  s->phase = SeqPhase::kWaiting;
  s->prefix.clear();
  s->fed = 0;
  s->samples_in_flight = 0;  // their outputs are dropped: the runner id no longer matches
  s->sampled_in_last_launch = false;
  s->at_context_limit = false;
  s->preemptions.fetch_add(1);
  d.preempted.push_back(s);
  waiting.push_back(s);
}

// Frees blocks for `s` by preempting `full` sequences not in this step that the policy ranks
// below it (streaming ones keep their reservation; one at its context limit frees nothing it
// could use).
bool StepPlanner::ensure_blocks(const SequencePtr& s, int blocks, std::vector<SequencePtr>& running,
                                std::vector<SequencePtr>& waiting,
                                const std::vector<SequencePtr>& scheduled, StepDecisions& d) {
  const KvCacheManager& kv = host_.kv();
  std::vector<SequencePtr> candidates;
  while (free_blocks_for_growth() < blocks) {
    candidates.clear();
    for (const SequencePtr& v : running)
      if (!v->request.cache.is_streaming() && !contains(scheduled, v) &&
          kv.remaining_capacity(v->runner_id) >= 1)
        candidates.push_back(v);
    const SequencePtr victim = policy_.choose_victim(candidates, *s);
    if (!victim) return false;
    std::erase(running, victim);
    preempt(victim, waiting, d);
  }
  return true;
}

int64_t StepPlanner::chunk_that_fits(const Sequence& s, int64_t want, int free_blocks) const {
  const KvCacheManager& kv = host_.kv();
  if (kv.blocks_to_append(s.runner_id, want) <= free_blocks) return want;
  int64_t lo = 0, hi = want;  // blocks_to_append(lo) fits, (hi) does not
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (kv.blocks_to_append(s.runner_id, mid) <= free_blocks ? lo : hi) = mid;
  }
  return lo;
}

// Admits `s` into the runner when its blocks are free beside what running sequences are owed.
bool StepPlanner::admit(const SequencePtr& s, const std::vector<SequencePtr>& running,
                        Clock::time_point now, int& shortfall, StepDecisions& d) {
  const KvCacheManager& kv = host_.kv();
  const Request& r = s->request;
  shortfall = 0;
  const int room = free_blocks_for_growth() - owed_prefill_blocks();
  if (s->session) {
    if (!admit_turn(s, room, shortfall, d)) return false;
    std::vector<int32_t> prefix;
    if (s->session->pending) prefix.push_back(*s->session->pending);
    s->carried_tokens.store(static_cast<int>(prefix.size()));
    s->session->pending.reset();
    prefix.insert(prefix.end(), r.prompt.begin(), r.prompt.end());
    const int64_t n = static_cast<int64_t>(prefix.size());
    started(s, std::move(prefix), now, turn_match_, n);
    return true;
  }
  const int64_t len = static_cast<int64_t>(r.prompt.size() + s->generated.size());
  // A preempted request is recomputed from its prompt and the tokens it generated.
  std::vector<int32_t> resumed;
  if (!s->generated.empty()) {
    resumed = r.prompt;
    resumed.insert(resumed.end(), s->generated.begin(), s->generated.end());
  }
  const std::span<const int32_t> tokens =
      s->generated.empty() ? std::span<const int32_t>(r.prompt) : resumed;
  std::optional<PrefixMatch> match = lookup(*s, tokens);
  const bool streaming = r.cache.is_streaming();
  // Only the blocks it must compute count, and what taking cached ones costs the pool.
  const int cached = match ? static_cast<int>(match->blocks.size()) - match->pool_blocks : 0;
  const int need =
      (streaming ? kv.blocks_needed_max(r.cache, len, int64_t{1} << 40)
                 : kv.blocks_needed_now(r.cache, std::min<int64_t>(len + 1, kv.max_context()))) -
      cached;
  const int watermark = running.empty() || streaming
                            ? 0 : static_cast<int>(std::ceil(config_.kv_watermark * kv.num_blocks()));
  if (need + watermark > room) {
    shortfall = need + watermark - room;
    return false;
  }
  const SeqId id = next_runner_id_++;
  try {
    host_.add_sequence({id, r.cache, r.sampling, s->generated, match, tokens});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kResourceExhausted) return false;  // e.g. penalty state slots: later
    d.failed.push_back({s, e});
    return false;
  }
  s->runner_id = id;
  std::vector<int32_t> prefix = s->generated.empty() ? r.prompt : std::move(resumed);
  started(s, std::move(prefix), now, match, static_cast<int64_t>(tokens.size()));
  return true;
}

// A session's turn: its runner sequence continues (restored from host memory when offloaded)
// with a fresh sampler. It waits while a step of the previous turn is still in flight, so the
// restart never races the sampler of a step already launched.
bool StepPlanner::admit_turn(const SequencePtr& s, int room, int& shortfall, StepDecisions& d) {
  const KvCacheManager& kv = host_.kv();
  SessionState& ss = *s->session;
  const Request& r = s->request;
  if (ss.steps_in_flight > 0) return false;
  int need = 0;
  turn_match_.reset();
  if (ss.runner_id < 0) {  // its first turn: it may start from cached blocks
    turn_match_ = lookup(*s, r.prompt);
    need = kv.blocks_needed_max(r.cache, static_cast<int64_t>(r.prompt.size()), int64_t{1} << 40);
    if (turn_match_)
      need -= static_cast<int>(turn_match_->blocks.size()) - turn_match_->pool_blocks;
  } else {
    const KvSequence& k = kv.sequence(ss.runner_id);
    need = k.max_blocks - static_cast<int>(k.block_table.size());
    if (ss.offloaded && restores_ >= config_.max_restores_per_step) return false;
  }
  if (need > room) {
    shortfall = need - room;
    return false;
  }
  try {
    if (ss.runner_id < 0) {
      const SeqId id = next_runner_id_++;
      host_.add_sequence({id, r.cache, r.sampling, {}, turn_match_, r.prompt});
      ss.runner_id = id;
      s->stream_base.store(0);
    } else {
      if (ss.offloaded) {
        host_.restore_sequence(ss.runner_id);
        ss.offloaded = false;
        ++restores_;
        d.restores.push_back(ss.runner_id);
      }
      if (!host_.restore_done(ss.runner_id)) return false;  // copying beside the steps
      host_.restart_sampling(ss.runner_id, r.sampling);
      d.restarted.push_back(s);
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kResourceExhausted) return false;
    d.failed.push_back({s, e});
    return false;
  }
  s->runner_id = ss.runner_id;
  ss.in_runner = true;
  if (!turn_match_) s->stream_base.store(kv.sequence(ss.runner_id).num_tokens);
  return true;
}

// Cached positions are fed already: prefill starts at the first miss.
void StepPlanner::started(const SequencePtr& s, std::vector<int32_t> prefix, Clock::time_point now,
                          const std::optional<PrefixMatch>& match, int64_t queried) {
  s->step_blocks = 0;
  s->phase = SeqPhase::kRunning;
  s->prefix = std::move(prefix);
  s->fed = 0;
  if (match) {
    s->fed = match->tokens;
    prefix_queries_ += queried;
    prefix_hits_ += match->tokens;
  }
  if (s->queue_s.load() < 0) {
    s->queue_s.store(seconds(s->arrival, now));
    const int64_t cached =
        match ? std::min<int64_t>(match->tokens, static_cast<int64_t>(s->request.prompt.size()))
              : 0;
    s->cached_tokens.store(static_cast<int>(cached));
  }
}

std::optional<PrefixMatch> StepPlanner::lookup(Sequence& s, std::span<const int32_t> tokens) {
  if (!config_.enable_prefix_caching || !s.request.prefix_caching) return std::nullopt;
  const KvCacheManager& kv = host_.kv();
  if (!s.prefix_root) s.prefix_root = kv.prefix_root(s.request.cache, s.request.cache_salt);
  return kv.match_prefix(s.request.cache, *s.prefix_root, tokens, &s.prefix_hashes);
}

bool StepPlanner::overloaded(const std::vector<SequencePtr>& running,
                             const std::vector<SequencePtr>& waiting, Clock::time_point now) {
  auto missed = [&](const SequencePtr& s) {
    return s->phase != SeqPhase::kFinished && s->ttft_target.kind == LatencyTarget::Kind::kFixed &&
           !s->first_sample_at && seconds(s->arrival, now) > s->ttft_target.seconds;
  };
  return std::any_of(waiting.begin(), waiting.end(), missed) ||
         std::any_of(running.begin(), running.end(),
                     [&](const SequencePtr& s) { return s->prefilling() && missed(s); });
}

// The first prompt in feeding order (those being fed, in running order, then the queue's head):
// its explicit TTFT target is missed if the streams' TPOT targets (last_limits_) hold its feed,
// and met if it is fed at the full token budget. The TTFT is then what can still be met: a
// stream behind its target asks for the least prefill a step until it catches up, and in an
// overloaded server those steps took a quarter of the prompt tokens a full step does per second.
const Sequence* StepPlanner::ttft_at_stake(const std::vector<SequencePtr>& running,
                                           const std::vector<SequencePtr>& waiting,
                                           const StepComposition& decodes,
                                           Clock::time_point now) const {
  if (!config_.tpot_aware || !last_limits_.constrained || !cost_model_.trusted()) return nullptr;
  const Sequence* first = nullptr;
  KvGeometry g;
  int64_t start = 0, left = 0;
  for (const SequencePtr& s : running)
    if (s->prefilling()) {
      const KvSequence& ks = host_.kv().sequence(s->runner_id);
      first = s.get(), g = ks.geometry, start = ks.num_tokens;
      left = static_cast<int64_t>(s->prefix.size()) - s->fed;
      break;
    }
  if (!first)
    for (const SequencePtr& s : waiting)
      if (s->phase != SeqPhase::kFinished) {
        first = s.get(), g = s->geometry;
        left = static_cast<int64_t>(s->request.prompt.size());
        break;
      }
  if (!first || first->ttft_target.kind != LatencyTarget::Kind::kFixed || first->first_sample_at)
    return nullptr;
  const double time_left = first->ttft_target.seconds - seconds(first->arrival, now);
  if (time_left <= 0) return nullptr;
  StepLimits full = step_limits({}, 0, true, last_limits_.token_cap, last_limits_.min_tokens,
                                last_limits_.warmup_tokens);
  full.granularity = last_limits_.granularity;
  if (rill::unqueued_ttft_s(cost_model_, decodes, full, g, left, start) > time_left)
    return nullptr;  // missed either way
  return rill::unqueued_ttft_s(cost_model_, decodes, last_limits_, g, left, start) > time_left
             ? first
             : nullptr;
}

PrefillBudget StepPlanner::prefill_budget(const std::vector<SequencePtr>& running,
                                          const std::vector<SequencePtr>& waiting,
                                          const StepComposition& decodes, int token_cap,
                                          bool backlogged, Clock::time_point now,
                                          StepDraft& d) {
  // The steady step is that of the batch being built: the decoding streams, the prompts being
  // fed and those queued (up to max_num_seqs), as they will all decode.
  int64_t rows = decodes.decode_rows + static_cast<int64_t>(waiting.size());
  for (const SequencePtr& s : running)
    if (s->prefilling()) ++rows;
  d.step.steady_s = steady_step_s(cost_model_, decodes,
                                static_cast<int>(std::min<int64_t>(rows, config_.max_num_seqs)));
  if (d.step.steady_s > 0) last_steady_s_ = d.step.steady_s;
  const std::span<const StreamPace> targets =
      config_.tpot_aware ? std::span<const StreamPace>(targets_) : std::span<const StreamPace>();
  // Auto targets exist once decode steps are measured (step_limits).
  const double measured_steady_s = cost_model_.knows_decode() ? d.step.steady_s : 0;
  last_limits_ = step_limits(targets, measured_steady_s, cost_model_.trusted(), token_cap,
                             config_.min_prefill_tokens, config_.warmup_prefill_tokens,
                             cost_model_.prefill_spread());
  last_limits_.granularity = host_.prefill_token_granularity();
  last_decodes_ = decodes;
  if (config_.tpot_aware && overloaded(running, waiting, now)) {  // the fixed budget's steps
    d.urgent = nullptr;
    ++overloaded_steps_;
    StepLimits full = step_limits({}, 0, cost_model_.trusted(), token_cap,
                                  config_.min_prefill_tokens, config_.warmup_prefill_tokens);
    full.granularity = last_limits_.granularity;
    return PrefillBudget(cost_model_, decodes, full);
  }
  d.urgent = ttft_at_stake(running, waiting, decodes, now);
  if (d.urgent) {  // the prompt's TTFT over the streams' pace; only it is fed (plan)
    ++ttft_overrides_;
    StepLimits full = step_limits({}, 0, cost_model_.trusted(), token_cap,
                                  config_.min_prefill_tokens, config_.warmup_prefill_tokens);
    full.granularity = last_limits_.granularity;
    return PrefillBudget(cost_model_, decodes, full);
  }
  if (!backlogged) return PrefillBudget(cost_model_, decodes, last_limits_);
  // Behind the arrivals: auto targets yield (fixed ones hold). last_limits_ keeps the limits
  // without the backlog, which the unqueued TTFT of new arrivals is computed from.
  return PrefillBudget(cost_model_, decodes,
                       step_limits(targets, 0, cost_model_.trusted(), token_cap,
                                   config_.min_prefill_tokens, config_.warmup_prefill_tokens));
}

// A decoding stream's TPOT target and progress: its samples in flight count as taken, each as
// long as the last measured steady step (their time is not known yet).
StreamPace StepPlanner::pace(const Sequence& s, Clock::time_point now) const {
  StreamPace p(s.tpot_target);
  if (s.tpot_target.kind == LatencyTarget::Kind::kAuto) p.tpot.seconds = s.auto_tpot_target_s.load();
  if (!s.first_sample_at || s.tpot_target.kind != LatencyTarget::Kind::kFixed) return p;
  const int64_t tokens = s.samples_committed();
  p.elapsed_s = std::chrono::duration<double>(now - *s.first_sample_at).count() +
                s.samples_in_flight * last_steady_s_;
  p.intervals = std::max<int64_t>(0, tokens - 1);
  p.left = std::max<int64_t>(1, s.request.max_tokens - tokens);
  p.remaining = std::min<int64_t>(p.left, kPaceHorizon);
  return p;
}

bool StepPlanner::backlogged(const std::vector<SequencePtr>& waiting, Clock::time_point now) {
  return std::any_of(waiting.begin(), waiting.end(), [&](const SequencePtr& s) {
    return s->phase != SeqPhase::kFinished && !s->ttft_target.none() && now > s->order_deadline;
  });
}

void StepPlanner::add_input(PlannedStep& step, const SequencePtr& s, std::span<const int32_t> tokens, bool sample) {
  if (!s->request.cache.is_streaming()) {
    s->step_blocks = host_.kv().blocks_to_append(s->runner_id, static_cast<int64_t>(tokens.size()));
    promised_ += s->step_blocks;
    budget_.update(*s);
  }
  step.inputs.push_back({s->runner_id, tokens, LogitsMode::kNone, sample, sample ? s->request.logprobs : -1});
  step.seqs.push_back(s);
}

PlannedStep StepPlanner::plan(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting,
                              Clock::time_point now) {
  decode_tokens_.clear();
  decode_tokens_.reserve(static_cast<size_t>(config_.max_num_seqs));  // spans into it stay valid
  policy_.order_running(running);
  promised_ = 0;
  restores_ = 0;
  for (const SequencePtr& s : running) s->step_blocks = 0;
  budget_.reset(running);  // one walk per step; the planner's decisions keep it from here
  targets_.clear();
  StepDraft d;
  d.b = {config_.max_num_batched_tokens, config_.max_num_seqs};
  const StepComposition decodes = place_decodes(running, waiting, now, d);
  PrefillBudget budget =
      prefill_budget(running, waiting, decodes, d.b.tokens, backlogged(waiting, now), now, d);
  feed_prompts(running, waiting, budget, d);
  admit_prompts(running, waiting, now, budget, d);
  d.step.composition = budget.composition();
  prefetch_restores(waiting, d.step.decisions);
  return std::move(d.step);
}

// 1. Decode: one token for every running sequence whose prompt is fed.
StepComposition StepPlanner::place_decodes(std::vector<SequencePtr>& running,
                                           std::vector<SequencePtr>& waiting,
                                           Clock::time_point now, StepDraft& d) {
  const KvCacheManager& kv = host_.kv();
  StepComposition decodes;
  for (size_t i = 0; i < running.size() && d.b.tokens > 0 && d.b.seqs > 0;) {
    const SequencePtr s = running[i];
    if (s->prefilling() || s->at_context_limit || s->samples_committed() >= s->request.max_tokens) {
      ++i;
      continue;
    }
    if (!s->request.cache.is_streaming()) {
      if (kv.remaining_capacity(s->runner_id) < 1) { s->at_context_limit = true; ++i; continue; }
      const int need = kv.blocks_to_append(s->runner_id, 1);
      if (need > 0 && !ensure_blocks(s, need, running, waiting, d.scheduled, d.step.decisions)) {
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));  // nothing lower to preempt: itself
        preempt(s, waiting, d.step.decisions);
        continue;
      }
    }
    decode_tokens_.push_back(s->sampled_in_last_launch ? kLastSampled : s->generated.back());
    add_input(d.step, s, std::span<const int32_t>(&decode_tokens_.back(), 1), true);
    const KvSequence& ks = kv.sequence(s->runner_id);
    ++decodes.decode_rows;
    decodes.decode_keys += attended_keys(ks.geometry, ks.num_tokens, 1);
    targets_.push_back(pace(*s, now));
    d.scheduled.push_back(s);
    --d.b.tokens, --d.b.seqs, ++i;
  }
  d.step.decodes = static_cast<int>(d.step.inputs.size());
  return decodes;
}

// A chunk of `n` tokens of s's prefix (n <= what budget.fit allowed), at stream position `start`.
void StepPlanner::add_chunk(const SequencePtr& s, int64_t n, const KvGeometry& g, int64_t start,
                            PrefillBudget& budget, StepDraft& d) {
  const bool last = s->fed + n == static_cast<int64_t>(s->prefix.size());
  add_input(d.step, s, std::span<const int32_t>(s->prefix.data() + s->fed, static_cast<size_t>(n)),
            last);
  budget.take(n, g, start);
  s->fed += n;
  d.scheduled.push_back(s);
  --d.b.seqs;
}

// 2. Prefill chunks of admitted sequences: priority, then tight TTFT targets, first. A step for a
//    TTFT at stake feeds only that prompt.
void StepPlanner::feed_prompts(std::vector<SequencePtr>& running,
                               std::vector<SequencePtr>& waiting, PrefillBudget& budget,
                               StepDraft& d) {
  const KvCacheManager& kv = host_.kv();
  for (size_t i = 0; i < running.size() && !budget.exhausted() && d.b.seqs > 0; ++i) {
    const SequencePtr s = running[i];
    if (!s->prefilling() || (d.urgent && s.get() != d.urgent)) continue;
    const KvGeometry g = kv.sequence(s->runner_id).geometry;
    const int64_t start = kv.sequence(s->runner_id).num_tokens;
    const int64_t fits = budget.fit(static_cast<int64_t>(s->prefix.size()) - s->fed, g, start);
    if (fits == 0) continue;
    int64_t n = fits;
    if (!s->request.cache.is_streaming()) {
      n = chunk_that_fits(*s, n, free_blocks_for_growth());
      if (n == 0) {
        if (!ensure_blocks(s, kv.blocks_to_append(s->runner_id, 1), running, waiting, d.scheduled,
                           d.step.decisions))
          continue;
        n = chunk_that_fits(*s, fits, free_blocks_for_growth());
        if (n == 0) continue;
      }
    }
    add_chunk(s, n, g, start, budget, d);
  }
}

// 3. Admissions, in scheduling order; the first that does not fit stops the rest (no skipping
//    ahead: a large request is never starved by smaller ones behind it). A step for a TTFT at
//    stake admits up to that prompt and feeds only it.
void StepPlanner::admit_prompts(std::vector<SequencePtr>& running,
                                std::vector<SequencePtr>& waiting, Clock::time_point now,
                                PrefillBudget& budget, StepDraft& d) {
  const KvCacheManager& kv = host_.kv();
  while (!waiting.empty() && !budget.exhausted() && d.b.seqs > 0 &&
         static_cast<int>(running.size()) < config_.max_num_seqs &&
         !(d.urgent && d.urgent->phase == SeqPhase::kRunning)) {
    const SequencePtr s = waiting.front();
    if (s->phase == SeqPhase::kFinished) { waiting.erase(waiting.begin()); continue; }
    int shortfall = 0;
    if (!admit(s, running, now, shortfall, d.step.decisions) &&
        (shortfall == 0 || !host_.reclaim(shortfall, s->session.get()) ||
         !admit(s, running, now, shortfall, d.step.decisions)))
      break;
    waiting.erase(waiting.begin());
    running.push_back(s);
    budget_.add(*s);
    d.step.decisions.admitted.push_back(s);
    if (d.urgent && s.get() != d.urgent) continue;  // admitted; fed from the next step on
    const KvGeometry g = kv.sequence(s->runner_id).geometry;
    const int64_t start = kv.sequence(s->runner_id).num_tokens;
    const int64_t n = budget.fit(static_cast<int64_t>(s->prefix.size()) - s->fed, g, start);
    if (n == 0) break;  // admitted; fed from the next step on
    add_chunk(s, n, g, start, budget, d);
  }
}

// Restores for offloaded sessions whose turns wait behind the head of the queue, started now so
// that their copies run beside this step and the turns are admitted without waiting for them.
// Only turns ahead of any other request: their blocks never delay a request queued before them.
void StepPlanner::prefetch_restores(const std::vector<SequencePtr>& waiting, StepDecisions& d) {
  const KvCacheManager& kv = host_.kv();
  for (const SequencePtr& s : waiting) {
    if (restores_ >= config_.max_restores_per_step || !s->session) return;
    SessionState& ss = *s->session;
    const bool refused = std::any_of(d.failed.begin(), d.failed.end(),
                                     [&](const StepDecisions::Failure& f) { return f.seq == s; });
    if (s->phase == SeqPhase::kFinished || refused || !ss.offloaded || ss.steps_in_flight > 0)
      continue;
    if (kv.sequence(ss.runner_id).max_blocks > free_blocks_for_growth() - owed_prefill_blocks())
      return;
    try {
      host_.restore_sequence(ss.runner_id);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kResourceExhausted) return;
      throw;
    }
    ss.offloaded = false;
    ++restores_;
    d.restores.push_back(ss.runner_id);
  }
}

}  // namespace rill
