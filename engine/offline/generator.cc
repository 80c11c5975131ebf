#include "engine/offline/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/error.h"

namespace rill {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct SequenceGuard {  // removes the sequence however generate() leaves
  ModelRunner& runner;
  SeqId id;
  ~SequenceGuard() { runner.remove_sequence(id); }
};

}  // namespace

GenerationResult generate(ModelRunner& runner, SeqId id, const GenerationRequest& req, const TokenCallback& on_token,
                          int prefill_chunk) {
  if (req.prompt.empty()) throw Error(ErrorCode::kInvalidArgument, "empty prompt");
  if (req.max_tokens < 0) throw Error(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  if (prefill_chunk <= 0) throw Error(ErrorCode::kInvalidArgument, "prefill chunk must be positive");
  const int64_t context = runner.kv().max_context();
  if (!req.cache.is_streaming() && static_cast<int64_t>(req.prompt.size()) > context)
    throw Error(ErrorCode::kOutOfRange, "prompt of " + std::to_string(req.prompt.size()) +
                                            " tokens exceeds the context limit " + std::to_string(context));
  GenerationResult res;
  res.prompt_tokens = static_cast<int>(req.prompt.size());
  const auto t0 = Clock::now();
  runner.add_sequence({id, req.cache, req.sampling});
  SequenceGuard guard{runner, id};
  if (req.max_tokens == 0) return res;

  int32_t next = -1;
  for (size_t pos = 0; pos < req.prompt.size(); pos += prefill_chunk) {
    const size_t n = std::min<size_t>(prefill_chunk, req.prompt.size() - pos);
    const bool last = pos + n == req.prompt.size();
    StepInput in{id, std::span<const int32_t>(req.prompt.data() + pos, n), LogitsMode::kNone, last};
    next = runner.step(std::span<const StepInput>(&in, 1)).sampled[0];
  }
  auto t_first = Clock::now(), t_last = t_first;
  res.ttft_s = seconds(t0, t_first);
  for (;;) {
    res.tokens.push_back(next);
    t_last = Clock::now();
    const bool stop = !req.ignore_eos && std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), next) !=
                                             req.stop_token_ids.end();
    if (stop) {
      res.finish = FinishReason::kStop;
      break;
    }
    if (on_token && !on_token(next)) {
      res.finish = FinishReason::kCancelled;
      break;
    }
    if (static_cast<int>(res.tokens.size()) >= req.max_tokens || runner.kv().remaining_capacity(id) < 1) {
      res.finish = FinishReason::kLength;
      break;
    }
    StepInput in{id, std::span<const int32_t>(&next, 1), LogitsMode::kNone, true};
    next = runner.step(std::span<const StepInput>(&in, 1)).sampled[0];
  }
  res.total_s = seconds(t0, t_last);
  if (res.tokens.size() > 1) res.tpot_s = seconds(t_first, t_last) / static_cast<double>(res.tokens.size() - 1);
  return res;
}

}  // namespace rill
