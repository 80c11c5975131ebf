// Sampling parameters of one request, and the CPU sampler (the reference for the GPU sampler).
// Every member has its row in sampling_fields() (sampling_fields.h): name, range, default, docs;
// the front ends, the tools and validation derive from that table.
//
// Order, as in vLLM: repetition / frequency / presence penalties on the logits, then
// temperature, then the kept set {p >= tau} with tau the largest of the top-k, top-p (computed
// within the top-k set) and min-p thresholds, then inverse-CDF sampling in token-id order with a
// Philox uniform drawn from (seed, step). Temperature 0 is greedy (argmax, lowest id on ties).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace rill {

/// The defaults are OpenAI's; a request starts from the server's (sampling_fields.h,
/// resolve_sampling_defaults).
struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; over prompt and generated tokens
  float presence_penalty = 0.0f;    // over generated tokens
  float frequency_penalty = 0.0f;   // over generated tokens
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 1e-6f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  /// Throws FieldError (kInvalidArgument) naming the first field out of its range in
  /// sampling_fields() (defined in sampling_fields.cc, beside the table).
  void validate() const;
};

/// Per-sequence sampler state: the draw counter and the token histories penalties need.
struct SamplerState {
  uint64_t step = 0;                                   // draws made so far
  uint64_t first_step = 0;                             // `step` when this runner took the sequence
  std::vector<uint8_t> prompt_seen;                    // [vocab] 1 where the prompt has the token
  std::unordered_map<int32_t, int32_t> output_counts;  // generated token -> count

  /// State of a sequence resumed after `generated` tokens (SequenceSpec::generated): the draw
  /// counter starts at their count and they count as output.
  static SamplerState resumed(std::span<const int32_t> generated);
  /// False until the first draw in this runner: tokens fed until then are prompt tokens.
  bool sampled() const { return step > first_step; }
};

/// Applies the penalties of `p` to `logits` in place.
void apply_penalties(std::span<float> logits, const SamplingParams& p, const SamplerState& s);

/// Sets the logits of the tokens a grammar mask disallows to -inf: bit (id & 31) of
/// mask[id >> 5] clear (ids past the mask are disallowed). After the penalties, before
/// temperature, so a disallowed token never wins the argmax nor gets probability mass.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask);

/// Samples one token from `logits` (modified in place) and advances the state. With a
/// non-empty `mask` (a constrained sequence's allowed tokens, grammar/matcher.h) only allowed
/// tokens can be drawn; an empty mask costs nothing. A mask allowing nothing yields token 0
/// (the caller ends such a sequence).
int32_t sample_token(std::span<float> logits, const SamplingParams& p, SamplerState& s,
                     std::span<const uint32_t> mask = {});

}  // namespace rill
