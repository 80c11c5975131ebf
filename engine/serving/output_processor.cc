#include "engine/serving/output_processor.h"

#include <algorithm>

namespace rill {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Prompt tokens the detokenizer sees as context: enough for a first token's leading space and
// for multi-token characters, without decoding a long prompt.
constexpr size_t kDetokContext = 16;

}  // namespace

int64_t evicted_tokens(const KvGeometry& g, int64_t stream_len) {
  if (!g.ring_tokens) return 0;
  return std::max<int64_t>(0, stream_len - g.n_sink - g.ring_tokens);
}

struct OutputProcessor::State {
  State(const Tokenizer& tok, const Sequence& s)
      : detok(tok, s.request.skip_special_tokens,
              std::span<const int32_t>(s.request.prompt)
                  .last(std::min(kDetokContext, s.request.prompt.size()))),
        filter(s.request.stop) {}
  IncrementalDetokenizer detok;
  StopFilter filter;
  int emitted = 0;  // token ids streamed
  int generated = 0;
  std::optional<Clock::time_point> first, last;
  bool done = false;
};

OutputProcessor::OutputProcessor(Tokenizer tokenizer, EngineMetrics& metrics,
                                 std::function<void(const SequencePtr&)> on_stop_string,
                                 std::function<void(const SequencePtr&)> on_finalized)
    : tokenizer_(std::move(tokenizer)),
      metrics_(metrics),
      on_stop_string_(std::move(on_stop_string)),
      on_finalized_(std::move(on_finalized)),
      thread_([this] { run(); }) {}

OutputProcessor::~OutputProcessor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OutputProcessor::push(OutputBatch batch) {
  if (batch.empty()) return;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void OutputProcessor::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    OutputBatch batch = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    process(batch);
    lock.lock();
  }
}

OutputProcessor::State& OutputProcessor::state_of(const SequencePtr& seq) {
  auto& st = states_[seq.get()];
  if (!st) st = std::make_unique<State>(tokenizer_, *seq);
  return *st;
}

void OutputProcessor::process(OutputBatch& batch) {
  // One chunk per request per batch: tokens of a step arrive together.
  for (const TokenNote& note : batch.tokens)
    if (!note.seq->finalized.load()) on_token(note);
  for (const TokenNote& note : batch.tokens) {
    if (note.seq->finalized.load()) continue;
    State& st = state_of(note.seq);
    TokenChunk chunk;
    st.filter.take_ready(chunk);
    if (!chunk.ids.empty() || !chunk.text.empty()) {
      st.emitted += static_cast<int>(chunk.ids.size());
      metrics_.generation_tokens.add(static_cast<double>(chunk.ids.size()));
      if (!note.seq->channel->push_chunk(std::move(chunk))) {
        // Consumer gone or too slow: the loop sees the cancel flag and finishes the request.
      }
    }
    if (st.filter.matched()) {
      finalize(note.seq, st,
               {note.seq, FinishReason::kStop, std::nullopt, ErrorCode::kInternal, {}});
      on_stop_string_(note.seq);
    }
  }
  for (const FinishNote& note : batch.finishes)
    if (!note.seq->finalized.load()) finalize(note.seq, state_of(note.seq), note);
  std::erase_if(states_, [](const auto& kv) { return kv.second->done; });
}

void OutputProcessor::on_token(const TokenNote& note) {
  State& st = state_of(note.seq);
  if (st.done) return;
  ++st.generated;
  if (!st.first) {
    st.first = note.time;
    metrics_.time_to_first_token.observe(seconds(note.seq->arrival, note.time));
  } else {
    metrics_.inter_token_latency.observe(seconds(*st.last, note.time));
  }
  st.last = note.time;
  const std::string piece = st.detok.push(note.token);
  st.filter.add(note.token, piece, note.logprobs ? &*note.logprobs : nullptr);
}

void OutputProcessor::finalize(const SequencePtr& seq, State& st, const FinishNote& note) {
  st.done = true;
  seq->finalized.store(true);
  const auto now = Clock::now();
  TokenChunk tail;
  if (!st.filter.matched()) {
    st.filter.add_text(st.detok.flush());
    st.filter.take_rest(tail);
  }
  FinalEvent fin;
  fin.reason = st.filter.matched() ? FinishReason::kStop : note.reason;
  if (st.filter.matched()) fin.stop_string = st.filter.matched_stop();
  fin.stop_token = note.stop_token;
  fin.error_code = note.error_code;
  fin.error_message = note.message;
  if (!tail.ids.empty() || !tail.text.empty()) {
    st.emitted += static_cast<int>(tail.ids.size());
    metrics_.generation_tokens.add(static_cast<double>(tail.ids.size()));
    seq->channel->push_chunk(std::move(tail));
  }
  const Request& r = seq->request;
  fin.usage.prompt_tokens = static_cast<int>(r.prompt.size());
  fin.usage.completion_tokens = st.emitted;
  fin.usage.cached_tokens = seq->cached_tokens.load();
  // The cache held the prompt and every generated token but the last (never fed back); a
  // session's turn counts what its own tokens pushed out of the session's window.
  const int64_t fed = seq->carried_tokens.load() + static_cast<int64_t>(r.prompt.size()) +
                      std::max(0, st.generated - 1);
  const int64_t base = seq->stream_base.load();
  fin.usage.evicted_tokens =
      evicted_tokens(seq->geometry, base + fed) - evicted_tokens(seq->geometry, base);
  fin.usage.preemptions = seq->preemptions.load();
  const double queue_s = seq->queue_s.load();
  fin.timings.queue_s = queue_s >= 0 ? queue_s : seconds(seq->arrival, now);
  if (st.first) {
    fin.timings.ttft_s = seconds(seq->arrival, *st.first);
    if (st.generated > 1) fin.timings.tpot_s = seconds(*st.first, *st.last) / (st.generated - 1);
  }
  fin.timings.e2e_s = seconds(seq->arrival, now);

  fin.timings.slo = judge_slo(target_seconds(seq->ttft_target, seq->auto_ttft_target_s.load()),
                              target_seconds(seq->tpot_target, seq->auto_tpot_target_s.load()),
                              fin.timings, st.first.has_value(), st.generated, fin.reason);
  metrics_.record_slo(fin.timings.slo);
  if (st.generated > 1) metrics_.time_per_output_token.observe(fin.timings.tpot_s);
  metrics_.e2e_request_latency.observe(fin.timings.e2e_s);
  metrics_.kv_evicted_tokens.add(static_cast<double>(fin.usage.evicted_tokens));
  metrics_.requests_finished(fin.reason).add();
  seq->channel->push_final(std::move(fin));
  on_finalized_(seq);
}

}  // namespace rill
