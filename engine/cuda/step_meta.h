// Per-step metadata of the CUDA runner: what moves host -> device each step (token ids,
// positions, cache slots, attention descriptors, block tables, sampling rows), packed into one
// pinned buffer and copied with one cudaMemcpyAsync. Section offsets depend only on the counts,
// so a decode step of a given batch size always has the same layout (what CUDA graphs need).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/runner/runner.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/sampling.h"

namespace rill::cuda {

/// Counts of a step, which fix the layout of its metadata.
struct StepShape {
  int tokens = 0;       // T: rows of the token matrix (decode rows first, then prefill chunks)
  int decode = 0;       // D: decode sequences (one row each)
  int prefill = 0;      // P: prefill chunks
  int logit_rows = 0;   // R: rows sent through the LM head (sampled rows first)
  int sampled = 0;      // NS: rows sampled on the GPU
  int max_blocks = 0;   // MB: block-table row width
  bool logprobs = false;  // some sampled row asks for log-probabilities (StepLayout::logprobs)
  bool operator==(const StepShape&) const = default;
};

struct StepLayout {
  size_t tokens, positions, sink_positions, rope_slot, late_slot, decode, prefill, tables, rows, sampling,
      logprobs, bytes;  // logprobs: [NS] int32 alternatives per sampled row (-1: none), if asked
  static StepLayout make(const StepShape& s);
};

/// Host-side plan of one step: the packed metadata plus how to map results back to inputs.
struct StepPlan {
  StepShape shape;
  StepLayout layout;
  int max_prefill_tokens = 0;          // longest chunk (prefill attention grid)
  int max_decode_keys = 0;             // most keys a decode row attends to (its split count)
  std::vector<int> input_first_row;    // per input: first row of the token matrix
  std::vector<int> sampled_index;      // per input: index among sampled rows, or -1
  std::vector<int> logits_first;       // per input: first logits row (within R), or -1
  std::vector<int> logits_count;       // per input: rows of logits returned
  std::vector<int> logprobs;           // per input: StepInput::logprobs if it samples, else -1
  bool any_logits = false;
};

/// Sampling state of one sequence the runner keeps on the host.
struct SamplingSlot {
  SamplingParams params;
  uint64_t step = 0;        // draws so far
  uint64_t first_step = 0;  // `step` when this runner took the sequence (resumed: generated tokens)
  int32_t state_slot = -1;  // row of the GPU penalty state, -1 without penalties
};

/// Writes the metadata of `inputs` into `out` (sized for the largest step) and returns the plan.
/// Every input's tokens must already be appended to `kv`. `pad_decode_to` > D pads the decode
/// rows with inert rows that write to `trash_block` (for CUDA-graph buckets); it requires a
/// decode-only step. `sampling(i)` gives input i's sampling slot. An input whose token is
/// kLastSampled reads it from row last_row[i] of the previous step's sampled tokens: its token id
/// is written as -1 - last_row[i] (kernels::EmbeddingParams::previous). `mask_row[i]`: the row of
/// the step's token-mask buffer holding input i's grammar mask (kernels::SampleParams::
/// token_masks), -1 unconstrained.
StepPlan plan_step(std::span<const StepInput> inputs, const std::vector<int64_t>& starts,
                   const KvCacheManager& kv, int max_blocks, int pad_decode_to, int32_t trash_block,
                   const std::vector<const SamplingSlot*>& sampling,
                   std::span<const int32_t> last_row, std::span<const int32_t> mask_row, char* out,
                   const char* device_base);

}  // namespace rill::cuda
