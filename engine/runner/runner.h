// The interface every model runner implements (CPU reference, CUDA). One step runs, for many
// sequences at once, decode tokens and prefill chunks together; each sequence has its own cache
// policy, sampling parameters and state, and can be removed (finished or cancelled) between steps.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/model/model_config.h"
#include "engine/runner/sample_logprobs.h"
#include "engine/runner/sampling.h"

namespace rill {

enum class LogitsMode { kNone, kLast, kAll };

struct SequenceSpec {
  SeqId id = 0;
  CachePolicy cache;
  SamplingParams sampling;
  /// Tokens this sequence generated before it was removed (a preempted request recomputed from
  /// its prompt followed by them). The sampler's draw counter starts at their count and the
  /// penalties count them as output, so the resumed sequence samples what it would have. Every
  /// token fed before the sequence's first sample in this runner counts as prompt for the
  /// repetition penalty (generated ones are counted as output anyway).
  std::vector<int32_t> generated;
  /// Prefix caching: the cached blocks it starts from (KvCacheManager::match_prefix on this
  /// runner's kv(), in its current state); nullopt: it neither reads nor publishes cached blocks.
  /// With a match, its cache holds prefix->tokens positions at once, and the caller feeds it
  /// from there.
  std::optional<PrefixMatch> prefix;
  /// With `prefix`: the tokens the match covers (the first prefix->tokens of what the caller
  /// would have fed), prompt tokens for the repetition penalty as if they had been fed.
  std::span<const int32_t> prefix_tokens;
};

/// An offload or restore of a sequence's cache (ModelRunner::offload_sequence) that completed.
struct KvTransfer {
  bool restore = false;  // host -> pool (else pool -> host)
  int blocks = 0;
  double seconds = 0;    // the copies' time on the device (the CPU runner: on the host)
};

/// One sequence's part of a step: `tokens` are appended to its cache (one for a decode step,
/// a chunk of the prompt for prefill).
struct StepInput {
  SeqId id = 0;
  std::span<const int32_t> tokens;
  LogitsMode logits = LogitsMode::kNone;  // logits copied back to the host
  bool sample = false;                    // sample the next token after the last one
  /// With `sample`: -1 no log-probabilities; 0 the sampled token's; N in [1, kMaxTopLogprobs]
  /// also the top N. Computed on the device: the logits stay there.
  int logprobs = -1;
  /// With `sample`: the tokens it may sample (a constrained sequence's grammar mask,
  /// engine/grammar/matcher.h): bit (id & 31) of mask[id >> 5], ceil(vocab / 32) words. Empty:
  /// unconstrained (costs nothing). Read during launch() only.
  std::span<const uint32_t> mask;
  /// With `sample` and no `mask`: the row is constrained, but its mask depends on the token its
  /// sequence samples in the step still in flight (this input is then kLastSampled). The runner
  /// starts the step's forward pass at launch and samples this row only once supply_masks()
  /// names its mask, so the host advances its grammar matchers while the forward pass runs.
  bool mask_later = false;
};

/// The mask of a `mask_later` row of the last launched step (ModelRunner::supply_masks).
struct LateMask {
  SeqId id = 0;
  std::span<const uint32_t> mask;  // ceil(vocab / 32) words, as StepInput::mask; read in the call
};

/// A token id that stands for the token its sequence sampled in the step launched just before
/// this one (a one-token input of a sequence that sampled there). With it a caller launches the
/// next decode step before the previous step's tokens have reached the host: the runner feeds
/// the sampled token on the device. Callers that take token ids from outside (a request's
/// prompt) reject negative ids themselves: a -1 there would read as this.
inline constexpr int32_t kLastSampled = -1;

struct StepOutput {
  std::vector<int32_t> sampled;     // per input: the sampled token, or -1
  std::vector<int64_t> logits_row;  // per input: first row in `logits`, or -1
  std::vector<float> logits;        // [rows, vocab]: kLast gives 1 row, kAll one per token
  std::vector<SampleLogprobs> logprobs;  // per input (empty unless some input asked for them)
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

  // Sequences that outlive a request (sessions): a new turn restarts sampling on the cache the
  // earlier turns left, and an idle sequence's cache can move to host memory and back.

  /// A new turn: keeps the sequence's cache and stream, replaces its sampling parameters and
  /// starts its sampler afresh (draws from 0; the tokens fed before its next sample are its
  /// prompt for the penalties). No step with the sequence may be in flight.
  virtual void restart_sampling(SeqId id, const SamplingParams& sampling) = 0;
  /// KV blocks of host memory for offloaded caches, and how many are free.
  virtual int host_kv_blocks() const = 0;
  virtual int host_kv_blocks_free() const = 0;
  /// Copies the sequence's cache blocks to host memory and frees them in the pool (ordered after
  /// the steps in flight). The sequence stays registered, stream and sampler kept, but takes no
  /// step until restore_sequence. kResourceExhausted (nothing changed) when host memory lacks
  /// room.
  virtual void offload_sequence(SeqId id) = 0;
  /// Pool blocks of offloads whose copies have not finished: they are freed once the copies are
  /// done (seen by completed_transfers), not at offload_sequence. Admission and reclaim count
  /// them as about to be free. 0 for runners whose offload frees at once.
  virtual int releasing_blocks() const { return 0; }
  /// Starts copying an offloaded cache back into pool blocks (kResourceExhausted, nothing
  /// changed, when the pool lacks them). The copy may run beside the steps in flight and later
  /// ones; the sequence is ready for a step once restore_done(id) (a step that carries it sooner
  /// waits for the copy on the device).
  virtual void restore_sequence(SeqId id) = 0;
  /// False while a restore of the sequence is still copying.
  virtual bool restore_done(SeqId id) = 0;
  /// The offloads and restores completed since the last call, oldest first.
  virtual std::vector<KvTransfer> completed_transfers() = 0;
  /// Starts one forward pass over all inputs (each sequence at most once per step). It may
  /// return before the step has run (the CUDA runner returns once the step is queued), so that
  /// the caller can prepare and launch the next step meanwhile, feeding it kLastSampled tokens.
  /// At most kMaxStepsInFlight steps are launched and not yet finished. Bad inputs throw here and
  /// change nothing; the sequences' caches grow by their tokens at launch.
  virtual void launch(std::span<const StepInput> inputs) = 0;
  /// Waits for the oldest launched step and returns its output (throws kInvalidArgument when no
  /// step is in flight). Removing a sequence while a step with it is in flight is allowed; its
  /// output slots are still filled.
  virtual StepOutput finish() = 0;
  /// Most sequences and most tokens one step may carry (the CUDA runner sizes its buffers and
  /// graphs for them); a scheduler must stay within both.
  virtual int max_step_sequences() const { return std::numeric_limits<int>::max(); }
  virtual int max_step_tokens() const { return std::numeric_limits<int>::max(); }
  /// A step carrying prompt tokens costs about the same for every token count (decode rows
  /// included) up to the next multiple of this: the CUDA runner rounds such a step's GEMMs up
  /// to it, so a planner may fill the rounding with prompt tokens at no cost. 1: no rounding.
  virtual int prefill_token_granularity() const { return 1; }
  /// Device time of the step finish() last returned, from its first copy to its last, when the
  /// runner measures it (the CUDA runner with step timing on, as by default; the CPU runner: the
  /// step's compute time on the host); 0 otherwise. The serving engine's step-cost model learns
  /// from it.
  virtual double last_step_device_ms() const { return 0; }
  /// Supplies the masks of the last launched step's `mask_later` rows and lets its sampling run
  /// (the CUDA runner enqueues the mask upload and the sampling kernel behind the step's forward
  /// pass; it never waits for the GPU here). Due exactly once for a step launched with such
  /// rows: launch() and that step's finish() throw kInvalidArgument while it is due (finishing
  /// the step before it is allowed). A `mask_later` row not named samples unconstrained: its
  /// sequence ended meanwhile and the caller drops that sample (a row whose sequence was
  /// removed samples nothing the caller may use). Throws kInvalidArgument, supplying nothing,
  /// when nothing is due, an id is not a `mask_later` row of the step, is named twice, or a
  /// mask has the wrong size.
  virtual void supply_masks(std::span<const LateMask> masks) = 0;
  /// launch() and finish() of one step.
  StepOutput step(std::span<const StepInput> inputs) {
    launch(inputs);
    return finish();
  }
  static constexpr int kMaxStepsInFlight = 2;
};

}  // namespace rill
