// The interface every model runner implements (CPU reference, CUDA). One step runs, for many
// sequences at once, decode tokens and prefill chunks together; each sequence has its own cache
// policy, sampling parameters and state, and can be removed (finished or cancelled) between steps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/model_config.h"
#include "engine/sampling.h"

namespace rill {

enum class LogitsMode { kNone, kLast, kAll };

struct SequenceSpec {
  SeqId id = 0;
  CachePolicy cache;
  SamplingParams sampling;
};

/// One sequence's part of a step: `tokens` are appended to its cache (one for a decode step,
/// a chunk of the prompt for prefill).
struct StepInput {
  SeqId id = 0;
  std::span<const int32_t> tokens;
  LogitsMode logits = LogitsMode::kNone;  // logits copied back to the host
  bool sample = false;                    // sample the next token after the last one
};

struct StepOutput {
  std::vector<int32_t> sampled;     // per input: the sampled token, or -1
  std::vector<int64_t> logits_row;  // per input: first row in `logits`, or -1
  std::vector<float> logits;        // [rows, vocab]: kLast gives 1 row, kAll one per token
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheManager& kv() const = 0;

  /// Registers a sequence (validates its policy and sampling parameters).
  virtual void add_sequence(const SequenceSpec& spec) = 0;
  /// Frees the sequence's cache blocks and state. Unknown ids are ignored.
  virtual void remove_sequence(SeqId id) = 0;
  /// Runs one forward pass over all inputs (each sequence at most once per step).
  virtual StepOutput step(std::span<const StepInput> inputs) = 0;
};

}  // namespace rill
