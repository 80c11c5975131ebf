// Model weights resident on the GPU in fp16 or bf16, uploaded once at load. Q/K/V are fused into
// one [qkv_dim, hidden] matrix and gate/up into one [2 * intermediate, hidden] matrix (with
// their biases), so each sub-layer runs one GEMM.
#pragma once

#include <vector>

#include "engine/cuda/cuda_util.h"
#include "engine/model/model.h"
#include "rill/kernels/common.h"

namespace rill::cuda {

/// Rows per tile of the interleaved gate|up matrix.
constexpr int kGateUpTile = 8;

struct DeviceLayer {
  const void* attn_norm = nullptr;      // [H]
  const void* attn_norm_bias = nullptr; // [H] (LayerNorm)
  const void* mlp_norm = nullptr;
  const void* mlp_norm_bias = nullptr;
  const void* wqkv = nullptr;           // [qkv_dim, H]
  const void* bqkv = nullptr;           // [qkv_dim] or null
  const void* wo = nullptr;             // [H, q_dim]
  const void* bo = nullptr;             // [H] or null
  const void* wup = nullptr;            // gated: [2I, H], see gate_up_interleaved(); plain: [I, H]
  const void* bup = nullptr;            // [2I] / [I] or null, rows as wup's
  const void* wdown = nullptr;          // [H, I]
  const void* bdown = nullptr;          // [H] or null
};

class DeviceWeights {
 public:
  /// Converts and uploads every weight of `model` as `dtype`.
  DeviceWeights(const Model& model, kernels::DType dtype);

  kernels::DType dtype() const { return dtype_; }
  size_t bytes() const { return arena_.bytes(); }
  const void* embed() const { return embed_; }      // [V, H]
  const void* lm_head() const { return lm_head_; }  // [V, H] (the embedding when tied)
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
  bool gate_up_interleaved_ = false;
  DeviceMemory arena_;
  const void* embed_ = nullptr;
  const void* lm_head_ = nullptr;
  const void* final_norm_ = nullptr;
  const void* final_norm_bias_ = nullptr;
  const float* inv_freq_ = nullptr;
  std::vector<DeviceLayer> layers_;
};

/// The dtype "auto" picks: the checkpoint's fp16/bf16, fp16 for fp32 checkpoints.
kernels::DType resolve_dtype(const std::string& requested, DType stored);

}  // namespace rill::cuda
