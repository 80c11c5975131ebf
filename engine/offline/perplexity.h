// Perplexity of a token stream under the four methods of the StreamingLLM paper's comparison
// (Xiao et al., ICLR 2024, Tables 1-2 and Figure 10):
//   full       dense attention within the context: independent chunks of `context` tokens, each
//              [BOS] + context - 1 text tokens;
//   window     the most recent `window` tokens only (streaming cache without sinks);
//   recompute  sliding window with re-computation: each token re-encodes its last `window`
//              tokens from scratch (positions 0..window-1);
//   streaming  n_sink attention sinks + a rolling window.
// The stream is [BOS] + text; nll[k] = -log p(text[k] | what the method keeps before it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runner/runner.h"

namespace rill {

enum class PplMethod { kFull, kWindow, kRecompute, kStreaming };
PplMethod parse_ppl_method(const std::string& name);  // full | window | recompute | streaming
const char* ppl_method_name(PplMethod m);

struct PplConfig {
  PplMethod method = PplMethod::kStreaming;
  int n_sink = 4;
  int window = 252;
  int context = 0;       // full: chunk length (0: the model's context)
  int chunk = 256;  // tokens fed per step (window / streaming); the result does not depend on it
                    // with a 16-bit cache (fp8: a chunk sees its own K/V unrounded)
  int batch = 32;        // recompute: windows per step
};

struct PplResult {
  std::vector<double> nll;  // one per text token
  double ppl = 0;
  double seconds = 0;
};

/// Evaluates `text` (token ids without BOS) with `bos` prepended, on `runner`.
PplResult evaluate_perplexity(ModelRunner& runner, const std::vector<int32_t>& text, int32_t bos, const PplConfig& cfg);

/// Mean time per token (ms) of feeding tokens one at a time once the method's cache is full,
/// over `tokens` steps (recompute: one window re-encoding per token) — the paper's Figure 10.
double per_token_latency_ms(ModelRunner& runner, const std::vector<int32_t>& text, int32_t bos, const PplConfig& cfg,
                            int tokens);

double perplexity_of(const std::vector<double>& nll, size_t begin = 0, size_t end = SIZE_MAX);

}  // namespace rill
