#include "engine/offline/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/error.h"

namespace rill {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// -log softmax(row)[target], in double.
double nll_of(const float* row, int vocab, int32_t target) {
  double mx = row[0];
  for (int i = 1; i < vocab; ++i) mx = std::max<double>(mx, row[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - mx);
  return -(double(row[target]) - mx - std::log(sum));
}

// Feeds `stream` to one sequence in chunks and scores each next token.
std::vector<double> score_stream(ModelRunner& r, SeqId id, const std::vector<int32_t>& stream, const CachePolicy& p,
                                 int chunk) {
  const int V = r.config().vocab_size;
  std::vector<double> nll;
  r.add_sequence({id, p, {}});
  try {
    for (size_t pos = 0; pos + 1 < stream.size(); pos += chunk) {
      const size_t n = std::min<size_t>(chunk, stream.size() - 1 - pos);
      StepInput in{id, std::span<const int32_t>(stream.data() + pos, n), LogitsMode::kAll, false};
      const StepOutput o = r.step(std::span<const StepInput>(&in, 1));
      for (size_t t = 0; t < n; ++t) nll.push_back(nll_of(&o.logits[t * V], V, stream[pos + t + 1]));
    }
  } catch (...) {
    r.remove_sequence(id);
    throw;
  }
  r.remove_sequence(id);
  return nll;
}

std::vector<double> score_full(ModelRunner& r, const std::vector<int32_t>& text, int32_t bos, int context, int chunk) {
  std::vector<double> nll;
  for (size_t a = 0; a < text.size(); a += context) {
    const size_t n = std::min<size_t>(context, text.size() - a);
    std::vector<int32_t> stream = {bos};
    stream.insert(stream.end(), text.begin() + a, text.begin() + a + n);  // predicts text[a .. a+n)
    auto part = score_stream(r, 1, stream, CachePolicy::full(), chunk);
    nll.insert(nll.end(), part.begin(), part.end());
  }
  return nll;
}

std::vector<double> score_recompute(ModelRunner& r, const std::vector<int32_t>& stream, int window, int batch) {
  const int V = r.config().vocab_size;
  const size_t n = stream.size() - 1;  // predictions
  // Targets k < window: the prefix itself is the window; one causal pass scores them all.
  std::vector<int32_t> head(stream.begin(), stream.begin() + std::min<size_t>(window, stream.size()));
  std::vector<double> nll = score_stream(r, 1, head, CachePolicy::full(), window);  // targets k < window - 1
  // Each later target k re-encodes its window stream[k + 1 - window .. k] from scratch.
  for (size_t k0 = nll.size(); k0 < n; k0 += batch) {
    const size_t nb = std::min<size_t>(batch, n - k0);
    std::vector<StepInput> inputs;
    for (size_t b = 0; b < nb; ++b) {
      const size_t k = k0 + b;
      const size_t start = k + 1 - window;
      r.add_sequence({static_cast<SeqId>(100 + b), CachePolicy::full(), {}});
      inputs.push_back({static_cast<SeqId>(100 + b), std::span<const int32_t>(stream.data() + start, window),
                        LogitsMode::kLast, false});
    }
    StepOutput o;
    try {
      o = r.step(inputs);
    } catch (...) {
      for (size_t b = 0; b < nb; ++b) r.remove_sequence(static_cast<SeqId>(100 + b));
      throw;
    }
    for (size_t b = 0; b < nb; ++b) {
      nll.push_back(nll_of(&o.logits[o.logits_row[b] * V], V, stream[k0 + b + 1]));
      r.remove_sequence(static_cast<SeqId>(100 + b));
    }
  }
  return nll;
}

}  // namespace

PplMethod parse_ppl_method(const std::string& name) {
  if (name == "full") return PplMethod::kFull;
  if (name == "window") return PplMethod::kWindow;
  if (name == "recompute") return PplMethod::kRecompute;
  if (name == "streaming") return PplMethod::kStreaming;
  throw Error(ErrorCode::kInvalidArgument, "unknown method '" + name + "' (full, window, recompute, streaming)");
}

const char* ppl_method_name(PplMethod m) {
  switch (m) {
    case PplMethod::kFull: return "full";
    case PplMethod::kWindow: return "window";
    case PplMethod::kRecompute: return "recompute";
    case PplMethod::kStreaming: return "streaming";
  }
  return "?";
}

double perplexity_of(const std::vector<double>& nll, size_t begin, size_t end) {
  end = std::min(end, nll.size());
  if (begin >= end) return NAN;
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += nll[i];
  return std::exp(s / double(end - begin));
}

PplResult evaluate_perplexity(ModelRunner& r, const std::vector<int32_t>& text, int32_t bos, const PplConfig& cfg) {
  if (text.empty()) throw Error(ErrorCode::kInvalidArgument, "empty text");
  if (cfg.chunk <= 0 || cfg.batch <= 0) throw Error(ErrorCode::kInvalidArgument, "chunk and batch must be positive");
  std::vector<int32_t> stream = {bos};
  stream.insert(stream.end(), text.begin(), text.end());
  PplResult res;
  const auto t0 = Clock::now();
  switch (cfg.method) {
    case PplMethod::kFull: {
      const int ctx = cfg.context > 0 ? cfg.context : r.kv().max_context();
      if (ctx < 2 || ctx > r.kv().max_context())
        throw Error(ErrorCode::kInvalidArgument, "context must be in [2, " + std::to_string(r.kv().max_context()) + "]");
      res.nll = score_full(r, text, bos, ctx, cfg.chunk);
      break;
    }
    case PplMethod::kWindow:
      res.nll = score_stream(r, 1, stream, CachePolicy::streaming(0, cfg.window), cfg.chunk);
      break;
    case PplMethod::kStreaming:
      res.nll = score_stream(r, 1, stream, CachePolicy::streaming(cfg.n_sink, cfg.window), cfg.chunk);
      break;
    case PplMethod::kRecompute:
      if (cfg.window < 1 || cfg.window > r.kv().max_context())
        throw Error(ErrorCode::kInvalidArgument, "window must be in [1, context]");
      res.nll = score_recompute(r, stream, cfg.window, cfg.batch);
      break;
  }
  res.seconds = since(t0);
  res.ppl = perplexity_of(res.nll);
  return res;
}

double per_token_latency_ms(ModelRunner& r, const std::vector<int32_t>& text, int32_t bos, const PplConfig& cfg,
                            int tokens) {
  std::vector<int32_t> stream = {bos};
  stream.insert(stream.end(), text.begin(), text.end());
  const int W = cfg.method == PplMethod::kFull ? (cfg.context > 0 ? cfg.context : r.kv().max_context()) - 1 : cfg.window;
  if (static_cast<int>(stream.size()) < W + tokens + 1)
    throw Error(ErrorCode::kInvalidArgument, "text too short to time " + std::to_string(tokens) + " tokens");
  if (cfg.method == PplMethod::kRecompute) {  // every token re-encodes a whole window
    const auto t0 = Clock::now();
    for (int k = 0; k < tokens; ++k) {
      r.add_sequence({1, CachePolicy::full(), {}});
      StepInput in{1, std::span<const int32_t>(stream.data() + k, W), LogitsMode::kNone, true};
      r.step(std::span<const StepInput>(&in, 1));
      r.remove_sequence(1);
    }
    return since(t0) * 1e3 / tokens;
  }
  const CachePolicy p = cfg.method == PplMethod::kStreaming ? CachePolicy::streaming(cfg.n_sink, cfg.window)
                        : cfg.method == PplMethod::kWindow  ? CachePolicy::streaming(0, cfg.window)
                                                            : CachePolicy::full();
  const int fill = cfg.method == PplMethod::kFull ? W - tokens : W;  // full: time the last tokens of the context
  r.add_sequence({1, p, {}});
  StepInput pre{1, std::span<const int32_t>(stream.data(), fill), LogitsMode::kNone, false};
  r.step(std::span<const StepInput>(&pre, 1));
  const auto t0 = Clock::now();
  for (int k = 0; k < tokens; ++k) {
    StepInput in{1, std::span<const int32_t>(stream.data() + fill + k, 1), LogitsMode::kNone, true};
    r.step(std::span<const StepInput>(&in, 1));
  }
  const double ms = since(t0) * 1e3 / tokens;
  r.remove_sequence(1);
  return ms;
}

}  // namespace rill
