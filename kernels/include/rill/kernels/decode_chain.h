// The dense part of a pre-norm decoder layer (Llama's), for decode steps of M <= 8 tokens, as one
// persistent kernel instead of six: o projection, residual add + MLP norm, gate|up projection with
// SiLU-and-mul, down projection, residual add + the next layer's attention norm, and the next
// layer's QKV projection.
//
// Why: at batch 1 every kernel boundary drains the memory pipe (the next GEMV's CTAs can only
// become resident once the last one's leave) and costs ~1.5-2 us (docs/performance.md). Here the
// CTAs stay resident (as many as fit, two per SM) and hand each stage's results to the next
// through a grid-wide barrier, while each CTA's shared-memory ring keeps streaming the next
// stage's weights across it. Every CTA normalises the rows itself (the norm is tiny; its weights
// and the rows come from L2), so a norm costs no barrier of its own.
//
// Results are bit-identical to the unfused kernels: every GEMV tile is computed as the 16-warp
// GEMV computes it (gemv_tile.cuh) and every norm row as add_norm's kernel does
// (add_norm_row.cuh).
#pragma once

#include "rill/kernels/common.h"
#include "rill/kernels/elementwise.h"

namespace rill::kernels {

struct DecodeChainParams {
  DType dtype = DType::kF16;
  NormType norm = NormType::kRms;
  float eps = 1e-5f;
  int M = 0;  // tokens, 1 .. 8
  int hidden = 0, q_dim = 0, intermediate = 0, qkv_dim = 0;
  // o = attn wo^T: attn [M, q_dim] (the previous kernel's output), wo [hidden, q_dim], o [M,
  // hidden].
  const void* attn = nullptr;
  const void* wo = nullptr;
  void* o = nullptr;
  // residual_mid = residual + o (+ bo), h = norm(residual_mid) * mlp_norm (+ mlp_norm_bias).
  // residual, residual_mid [M, hidden] fp32, distinct (CTAs read one while others write the other).
  float* residual = nullptr;
  float* residual_mid = nullptr;
  const void* bo = nullptr;
  const void* mlp_norm = nullptr;
  const void* mlp_norm_bias = nullptr;
  // act = silu(gate) * up from wup [2 * intermediate, hidden] in GemvEpilogue::kSiluMul's
  // interleaved tiles (optional bias bup [2 * intermediate]); act [M, intermediate].
  const void* wup = nullptr;
  const void* bup = nullptr;
  void* act = nullptr;
  // m = act wdown^T: wdown [hidden, intermediate], m [M, hidden].
  const void* wdown = nullptr;
  void* m = nullptr;
  // Optional (wqkv null: the chain ends after m, the last layer): residual = residual_mid + m
  // (+ bdown), h = norm(residual) * next_norm (+ next_norm_bias), qkv = h wqkv^T with wqkv
  // [qkv_dim, hidden], qkv [M, qkv_dim].
  const void* bdown = nullptr;
  const void* next_norm = nullptr;
  const void* next_norm_bias = nullptr;
  const void* wqkv = nullptr;
  void* qkv = nullptr;
  /// Two counters, zero before the launch and left zero by it (the grid's barriers). Launches
  /// that may overlap under PDL (consecutive layers) need counters of their own.
  unsigned* sync = nullptr;
};

/// True when launch_decode_chain takes these shapes on this device: M 1..8, dims multiples of 8,
/// hidden <= 8192, the shared memory for M normalised rows.
bool decode_chain_supported(DType dtype, int M, int hidden, int q_dim, int intermediate,
                            int qkv_dim);
cudaError_t launch_decode_chain(const DecodeChainParams& p, cudaStream_t stream);

}  // namespace rill::kernels
