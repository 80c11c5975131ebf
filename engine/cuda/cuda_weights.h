// Model weights resident on the GPU in fp16 or bf16, uploaded once at load; with fp8 weights
// (WeightQuant::kFp8) the decoder's linear layers are e4m3 with fp32 scales (fp8_image.h). Q/K/V
// are fused into one [qkv_dim, hidden] matrix and gate/up into one [2 * intermediate, hidden]
// matrix (with their biases), so each sub-layer runs one GEMM.
#pragma once

#include <vector>

#include "engine/cuda/cuda_util.h"
#include "engine/model/model.h"
#include "engine/model/quantization.h"
#include "rill/kernels/common.h"
#include "rill/kernels/gemv_fp8.h"

namespace rill::cuda {

/// Rows per tile of the interleaved gate|up matrix.
constexpr int kGateUpTile = 8;

/// A linear layer's weight [N, K] on the device: 16-bit (the compute dtype), or e4m3 with fp32
/// scales.
struct DeviceLinear {
  const void* w = nullptr;
  const float* scale = nullptr;  // fp8 only: see kernels::Fp8ScaleLayout
  kernels::Fp8ScaleLayout scale_layout = kernels::Fp8ScaleLayout::kPerRow;
  /// fp8 with static activations: the per-tensor input scale (one fp32 on the device); null:
  /// activations are quantized dynamically in the W8A8 GEMM.
  const float* input_scale = nullptr;
  bool fp8() const { return scale != nullptr; }
};

struct DeviceLayer {
  const void* attn_norm = nullptr;      // [H]
  const void* attn_norm_bias = nullptr; // [H] (LayerNorm)
  const void* mlp_norm = nullptr;
  const void* mlp_norm_bias = nullptr;
  DeviceLinear wqkv;                    // [qkv_dim, H]
  const void* bqkv = nullptr;           // [qkv_dim] or null
  DeviceLinear wo;                      // [H, q_dim]
  const void* bo = nullptr;             // [H] or null
  DeviceLinear wup;                     // gated: [2I, H], see gate_up_interleaved(); plain: [I, H]
  const void* bup = nullptr;            // [2I] / [I] or null, rows as wup's
  DeviceLinear wdown;                   // [H, I]
  const void* bdown = nullptr;          // [H] or null
  KvScales kv_scales;                   // an fp8 KV cache's (1 unless calibrated)
};

class DeviceWeights {
 public:
  /// Converts and uploads every weight of `model` as `dtype`; with kFp8 the decoder's linear
  /// layers as e4m3 (as the checkpoint stores them, else quantized per channel), and an LM head
  /// the checkpoint quantized.
  DeviceWeights(const Model& model, kernels::DType dtype, WeightQuant quant = WeightQuant::kNone);

  kernels::DType dtype() const { return dtype_; }
  size_t bytes() const { return arena_.bytes(); }
  const void* embed() const { return embed_; }      // [V, H]
  const DeviceLinear& lm_head() const { return lm_head_; }  // [V, H] (the embedding when tied)
  WeightQuant quantization() const { return quant_; }
  const void* final_norm() const { return final_norm_; }
  const void* final_norm_bias() const { return final_norm_bias_; }
  const float* inv_freq() const { return inv_freq_; }
  const std::vector<DeviceLayer>& layers() const { return layers_; }
  /// Gated MLPs: true when the gate and up rows of wup alternate in tiles of kGateUpTile (gate
  /// rows 8j..8j+7, then up rows 8j..8j+7), the layout GemvEpilogue::kSiluMul reads; false (I not
  /// a multiple of 8) when wup is all gate rows, then all up rows.
  bool gate_up_interleaved() const { return gate_up_interleaved_; }

 private:
  kernels::DType dtype_;
  WeightQuant quant_;
  bool gate_up_interleaved_ = false;
  DeviceMemory arena_;
  const void* embed_ = nullptr;
  DeviceLinear lm_head_;
  const void* final_norm_ = nullptr;
  const void* final_norm_bias_ = nullptr;
  const float* inv_freq_ = nullptr;
  std::vector<DeviceLayer> layers_;
};

/// The dtype "auto" picks: the checkpoint's fp16/bf16, fp16 for fp32 checkpoints.
kernels::DType resolve_dtype(const std::string& requested, DType stored);

}  // namespace rill::cuda
