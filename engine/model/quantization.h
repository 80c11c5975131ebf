// Weight quantization: what a checkpoint's config.json says (`quantization_config`) and what the
// runners do with it (EngineOptions::quantization). Rill runs fp8 (e4m3) weights:
//   - compressed-tensors, `float-quantized` format, 8-bit float weights with per-tensor,
//     per-channel or 128 x 128 block scales (`weight_scale`), activations static per tensor
//     (`input_scale`) or dynamic per token / per 128-group, and its `ignore` list;
//   - Hugging Face `quant_method: fp8` with `weight_block_size` [128, 128] (`weight_scale_inv`,
//     dynamic activations), or without it AutoFP8's per-tensor `weight_scale` (static
//     `input_scale` or dynamic activations);
//   - any bf16/fp16/fp32 checkpoint with `--quantization fp8`: per-channel weight scales computed
//     at load, dynamic per-token activations.
// Every other scheme is refused at load with the method, the scheme and what is supported.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rill {

/// What the checkpoint stores.
enum class QuantMethod {
  kNone,               // no quantization_config
  kCompressedTensors,  // quant_method "compressed-tensors", float-quantized fp8
  kFp8,                // quant_method "fp8" (FineGrainedFP8Config; AutoFP8 without block size)
};

/// How a quantized weight's scales are laid out (one value per block of rows x columns).
enum class WeightScaleKind { kTensor, kChannel, kBlock };

/// How the activations entering a quantized linear layer are quantized in W8A8 GEMMs.
enum class ActivationQuant {
  kDynamicPerToken,  // one scale per token (row), computed at run time
  kDynamicPerGroup,  // one scale per token and 128 columns (block-scaled weights)
  kStaticPerTensor,  // the checkpoint's `input_scale`
};

/// Calibrated KV-cache scales in a checkpoint: compressed-tensors' (and vLLM fp8's)
/// `kv_cache_scheme`, the "-FP8-KV" checkpoints, or AutoFP8's `kv_cache_quant_targets`. An fp8
/// KV cache (`--kv-cache-dtype fp8`) stores e4m3(k / k_scale) and e4m3(v / v_scale) with them;
/// without them it uses scales of 1, as vLLM does without calibration.
enum class KvScaleScheme {
  kNone,
  kPerTensor,  // one k and one v scale a layer
  kPerHead,    // one a KV head (llm-compressor's "attn_head"): the cache uses each layer's largest
  kUnsupported,  // not an fp8 scheme (e.g. int8) or dynamic: no scales are read
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  WeightScaleKind weights = WeightScaleKind::kChannel;
  int block_rows = 0, block_cols = 0;  // kBlock: 128 x 128
  ActivationQuant activations = ActivationQuant::kDynamicPerToken;
  /// Modules left in the model dtype: compressed-tensors' `ignore`, transformers'
  /// `modules_to_not_convert`. Each is a module name ("lm_head", "model.layers.0.mlp.down_proj")
  /// or, with a "re:" prefix, a regular expression the whole name must match.
  std::vector<std::string> ignore;
  /// compressed-tensors `targets`: "Linear" (every linear layer), module names or "re:" patterns.
  std::vector<std::string> targets;
  /// Calibrated fp8 KV-cache scales the checkpoint carries (read_kv_cache_scales reads them).
  KvScaleScheme kv_scales = KvScaleScheme::kNone;
  /// kUnsupported: the scheme as the checkpoint states it (e.g. "int8 (type=int, num_bits=8,
  /// strategy=tensor)"), for describe().
  std::string kv_scheme_summary;

  bool quantized() const { return method != QuantMethod::kNone; }
  /// Name of the scale tensor beside "<module>.weight": "weight_scale" or "weight_scale_inv".
  const char* scale_suffix() const;
  /// True when the checkpoint stores `module`'s (e.g. "model.layers.3.mlp.up_proj") weight as
  /// fp8: a target of the scheme and not ignored.
  bool quantizes(const std::string& module) const;
  /// One line for logs and the model-info APIs, e.g. "fp8 (compressed-tensors, per-channel
  /// weight scales, dynamic per-token activations)"; "none" when not quantized.
  std::string describe() const;
};

/// Parses config.json's `quantization_config` (absent: kNone). Throws kUnsupported naming the
/// method and scheme, and what is supported, for anything but the fp8 schemes above;
/// kInvalidArgument (naming `source`) for malformed fields.
QuantizationConfig parse_quantization_config(const nlohmann::json& config,
                                             const std::string& source);

/// What the runners hold for the linear layers of the decoder (EngineOptions::quantization).
enum class WeightQuant {
  kNone,  // the model dtype; fp8 checkpoints are dequantized at load
  kFp8,   // e4m3 with the checkpoint's scales; linear weights it left unquantized get
          // per-channel scales at load (the whole model, for a bf16/fp16/fp32 checkpoint)
};

/// `requested`: "auto" (fp8 when the checkpoint is quantized, else none), "fp8" or "none".
/// Throws kInvalidArgument for another name.
WeightQuant resolve_quantization(const std::string& requested,
                                 const QuantizationConfig& checkpoint);

/// One line for logs and the model-info APIs: the checkpoint's scheme, "fp8 (per-channel weight
/// scales computed at load, dynamic per-token activations)" or "none".
std::string describe_quantization(WeightQuant mode, const QuantizationConfig& checkpoint);

}  // namespace rill
