// The model description shared by the CPU and CUDA runners: architecture hyper-parameters read
// from a Hugging Face config.json (or a llama2.c header), normalised to one vocabulary.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/model/dtype.h"
#include "engine/model/quantization.h"

namespace rill {

enum class Arch { kLlama, kMistral, kQwen2, kGptNeoX };
enum class NormKind { kRmsNorm, kLayerNorm };
enum class Activation { kSilu, kGeluErf, kGeluTanh };

struct RopeConfig {
  double theta = 10000.0;
  int rotary_dim = 0;               // leading dims of each head that rotate (partial rotary)
  std::string scaling = "none";     // none | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;     // llama3
  double high_freq_factor = 4.0;    // llama3
  int original_max_position = 8192; // llama3
  /// Inverse frequencies, rotary_dim / 2 of them, computed as transformers does (fp32 values).
  std::vector<float> inv_freq() const;
};

struct ModelConfig {
  std::string architecture;  // as in config.json, e.g. "LlamaForCausalLM"
  Arch arch = Arch::kLlama;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 0;
  float norm_eps = 1e-5f;
  NormKind norm = NormKind::kRmsNorm;
  Activation act = Activation::kSilu;
  bool gated_mlp = true;           // SwiGLU (gate * up) vs plain up -> act -> down
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
  bool tie_word_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  int sliding_window = 0;          // 0: none (Mistral sets it)
  RopeConfig rope;
  DType stored_dtype = DType::kF32;  // of the unquantized tensors (embeddings, norms)
  QuantizationConfig quant;          // config.json's quantization_config
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  /// Throws kInvalidArgument naming `source` when sizes are inconsistent.
  void validate(const std::string& source) const;
};

/// Parses config.json (transformers 4.x and 5.x spellings). Throws rill::Error naming the file.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& source);
ModelConfig load_hf_config(const std::filesystem::path& config_json);

}  // namespace rill
