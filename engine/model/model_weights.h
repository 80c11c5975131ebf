// Canonical per-layer weight views for every supported architecture. Loaders map checkpoint
// names onto this one layout (and check every shape), so runners never see checkpoint names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/tensor.h"

namespace rill {

/// A layer's fp8 KV-cache scales (vLLM's k_scale / v_scale): an fp8 cache holds e4m3(key / k)
/// and e4m3(value / v). 1 unless the checkpoint carries calibrated ones (read_kv_cache_scales).
struct KvScales {
  float k = 1, v = 1;
};

struct LayerWeights {
  Tensor attn_norm, attn_norm_bias;  // [hidden]; bias only for LayerNorm
  Tensor q, k, v;                    // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden]
  Tensor q_bias, k_bias, v_bias;     // [q_dim], [kv_dim], [kv_dim] (optional)
  Tensor o, o_bias;                  // [hidden, q_dim], [hidden]
  Tensor mlp_norm, mlp_norm_bias;    // [hidden]
  Tensor gate, gate_bias;            // [intermediate, hidden]; absent for a plain (GELU) MLP
  Tensor up, up_bias;                // [intermediate, hidden], [intermediate]
  Tensor down, down_bias;            // [hidden, intermediate], [hidden]
  KvScales kv_scales;
};

struct ModelWeights {
  Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm, final_norm_bias;  // [hidden]
  Tensor lm_head;                      // [vocab, hidden]; the embedding when tied
};

/// Maps Hugging Face tensor names onto ModelWeights for `config.arch`, checking each shape, and
/// reads the KV-cache scales config.quant declares (read_kv_cache_scales). `source` names the
/// checkpoint in error messages.
ModelWeights map_hf_weights(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                            const std::string& source);

}  // namespace rill
