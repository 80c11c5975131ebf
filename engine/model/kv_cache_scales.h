// Calibrated fp8 KV-cache scales of a checkpoint (QuantizationConfig::kv_scales): one k and one
// v scale a layer, under the names the quantizers write them (vLLM reads the same), <attn> being
// "model.layers.<i>.self_attn" (GPT-NeoX: "gpt_neox.layers.<i>.attention"):
//   - llm-compressor (compressed-tensors), vLLM fp8: <attn>.k_scale, <attn>.v_scale;
//   - NVIDIA ModelOpt: <attn>.k_proj.k_scale, <attn>.v_proj.v_scale;
//   - AutoFP8, older compressed-tensors: <attn>.k_proj.output_scale, <attn>.v_proj.output_scale;
//   - older AutoFP8: <attn>.kv_scale, one scale for both.
#pragma once

#include <map>
#include <string>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/tensor.h"

namespace rill {

/// Sets w.layers[i].kv_scales from `tensors` when config.quant declares calibrated scales
/// (kPerTensor or kPerHead); otherwise leaves them at 1. A scale holds one value ([] or [1]) or
/// one a KV head ([num_kv_heads]; the layer takes the largest, so no calibrated value clips).
/// A missing scale, one of another shape, or a value that is not finite and positive is refused
/// (kInvalidArgument) with the layer and the tensor named; `source` names the checkpoint.
void read_kv_cache_scales(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                          ModelWeights& w, const std::string& source);

}  // namespace rill
