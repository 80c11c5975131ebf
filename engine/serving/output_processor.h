// The output thread: turns each finished step's sampled tokens into events, in order, off the
// loop thread (which meanwhile launches the next step). Per request it detokenizes
// incrementally, holds back text that may start a stop string, matches stop strings across
// token boundaries, delivers token chunks and the one final event, and records the per-request
// and per-token metrics. A stop-string match is reported back to the loop, which frees the
// sequence.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/scheduler/sequence.h"
#include "engine/serving/engine_metrics.h"
#include "engine/serving/stop_filter.h"
#include "engine/tokenizer/tokenizer.h"

namespace rill {

struct TokenNote {
  SequencePtr seq;
  int32_t token = 0;
  std::optional<SampleLogprobs> logprobs;
  Clock::time_point time;  // when the step that sampled it finished
};

struct FinishNote {
  SequencePtr seq;
  FinishReason reason = FinishReason::kStop;
  std::optional<int32_t> stop_token;
  ErrorCode error_code = ErrorCode::kInternal;
  std::string message;
};

/// What one loop iteration hands over: tokens first, then the finishes decided after them.
struct OutputBatch {
  std::vector<TokenNote> tokens;
  std::vector<FinishNote> finishes;
  bool empty() const { return tokens.empty() && finishes.empty(); }
};

class OutputProcessor {
 public:
  /// `on_stop_string(seq)`: a stop string ended the request (the final event is sent already).
  /// `on_finalized(seq)`: the final event of a request was delivered.
  OutputProcessor(Tokenizer tokenizer, EngineMetrics& metrics,
                  std::function<void(const SequencePtr&)> on_stop_string,
                  std::function<void(const SequencePtr&)> on_finalized);
  ~OutputProcessor();  // processes what was queued, then stops

  void push(OutputBatch batch);

 private:
  struct State;  // per request, output-thread-owned
  void run();
  void process(OutputBatch& batch);
  void on_token(const TokenNote& note);
  void finalize(const SequencePtr& seq, State& st, const FinishNote& note);
  State& state_of(const SequencePtr& seq);

  Tokenizer tokenizer_;
  EngineMetrics& metrics_;
  std::function<void(const SequencePtr&)> on_stop_string_, on_finalized_;
  std::unordered_map<const Sequence*, std::unique_ptr<State>> states_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OutputBatch> queue_;
  bool stop_ = false;
  std::thread thread_;
};

/// Tokens a sequence of `stream_len` tokens has dropped from its cache (sinks + ring geometry;
/// the same count as KvCacheManager's).
int64_t evicted_tokens(const KvGeometry& g, int64_t stream_len);

}  // namespace rill
