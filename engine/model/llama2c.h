// Loads llama2.c checkpoints (Karpathy's run.c format: legacy version 0 and version 1, fp32).
#pragma once

#include <filesystem>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"

namespace rill {

struct Llama2cCheckpoint {
  ModelConfig config;
  ModelWeights weights;
};

/// Reads `model_bin`. Query/key rows are permuted from Meta's interleaved rotary layout to the
/// rotate-half layout that transformers (and every Rill kernel) uses.
Llama2cCheckpoint load_llama2c(const std::filesystem::path& model_bin);

}  // namespace rill
