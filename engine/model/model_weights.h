// Canonical per-layer weight views for every supported architecture. Loaders map checkpoint
// names onto this one layout (and check every shape), so runners never see checkpoint names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/tensor.h"

namespace rill {

struct LayerWeights {
  Tensor attn_norm, attn_norm_bias;  // [hidden]; bias only for LayerNorm
  Tensor q, k, v;                    // [q_dim, hidden], [kv_dim, hidden], [kv_dim, hidden]
  Tensor q_bias, k_bias, v_bias;     // [q_dim], [kv_dim], [kv_dim] (optional)
  Tensor o, o_bias;                  // [hidden, q_dim], [hidden]
  Tensor mlp_norm, mlp_norm_bias;    // [hidden]
  Tensor gate, gate_bias;            // [intermediate, hidden]; absent for a plain (GELU) MLP
  Tensor up, up_bias;                // [intermediate, hidden], [intermediate]
  Tensor down, down_bias;            // [hidden, intermediate], [hidden]
};

struct ModelWeights {
  Tensor embed;                      // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm, final_norm_bias;  // [hidden]
  Tensor lm_head;                    // [vocab, hidden]; the embedding when tied
};

/// Maps Hugging Face tensor names onto ModelWeights for `config.arch`, checking each shape.
/// `source` names the checkpoint in error messages.
ModelWeights map_hf_weights(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                            const std::string& source);

}  // namespace rill
