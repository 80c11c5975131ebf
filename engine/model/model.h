// A loaded model: description (config + weight views), tokenizer and generation defaults.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runner/sampling_fields.h"
#include "engine/tokenizer/tokenizer.h"

namespace rill {

/// The model's generation defaults from generation_config.json, vLLM's --generation-config
/// "auto": the sampling fields it sets (those of sampling_fields() marked in_generation_config:
/// temperature, top_k, top_p, min_p, repetition_penalty), applied to every request that leaves
/// them unset, below a server override (resolve_sampling_defaults). `"do_sample": false` makes
/// greedy the default (temperature 0; its top_k / top_p / min_p are then not applied), as in
/// transformers; absent, the values apply as given, as in vLLM.
struct GenerationDefaults {
  SamplingOverrides sampling;
  std::optional<int> max_new_tokens;  // read for completeness; max_tokens defaults are per endpoint
  std::vector<int> eos_token_ids;
};

/// Reads a generation_config.json. A missing file gives empty defaults; a malformed one, or a
/// sampling value out of its range, throws kInvalidArgument naming the file and the key.
GenerationDefaults load_generation_config(const std::filesystem::path& file);

struct Model {
  std::filesystem::path path;
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<const Tokenizer> tokenizer;
  GenerationDefaults generation;

  /// Token ids that end generation: config, generation_config and tokenizer EOS, deduplicated.
  std::vector<int> stop_token_ids() const;
  /// BOS from the tokenizer, else the config.
  std::optional<int> bos_token_id() const;
};

/// Loads a Hugging Face model directory (config.json, safetensors, tokenizer.json, ...) or a
/// llama2.c checkpoint (a .bin file, tokenizer.bin beside it; or a directory holding model.bin).
/// Throws rill::Error naming the file and the problem.
Model load_model(const std::filesystem::path& path);

}  // namespace rill
