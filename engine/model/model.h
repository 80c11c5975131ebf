// A loaded model: description (config + weight views), tokenizer and generation defaults.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace rill {

/// Sampling defaults from generation_config.json (what transformers' generate would use).
struct GenerationDefaults {
  bool do_sample = false;
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<int> max_new_tokens;
  std::vector<int> eos_token_ids;
};

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
