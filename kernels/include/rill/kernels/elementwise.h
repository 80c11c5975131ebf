// Embedding gather, residual add fused with the next norm, activations, and the K/V scatter.
#pragma once

#include "rill/kernels/common.h"

namespace rill::kernels {

/// out[t, :] = float(table[id, :]) with id = tokens[t], or id = previous[-1 - tokens[t]] for a
/// negative tokens[t] when `previous` is given (a token sampled by the step before, still on the
/// device); ids outside [0, vocab) give a zero row. A vocabulary-parallel shard (tensor
/// parallelism) holds rows [vocab_begin, vocab_begin + vocab): row id - vocab_begin, zero for
/// ids outside.
struct EmbeddingParams {
  DType dtype = DType::kF16;
  int num_tokens = 0, hidden = 0, vocab = 0;
  int vocab_begin = 0;
  const void* table = nullptr;        // [vocab, hidden]
  const int32_t* tokens = nullptr;    // [num_tokens]
  const int32_t* previous = nullptr;  // optional: indexed by -1 - tokens[t]
  int num_previous = 0;               // entries of `previous`; other negative ids give zero rows
  float* out = nullptr;               // [num_tokens, hidden] fp32 residual stream
};
cudaError_t launch_embedding(const EmbeddingParams& p, cudaStream_t stream);

enum class NormType : int { kRms = 0, kLayer = 1 };

/// The most ranks and CTAs a PeerSum serves (flags are laid out for them).
constexpr int kMaxPeerRanks = 8;
constexpr int kMaxPeerCtas = 512;

/// A one-shot all-reduce fused into the residual add: every rank of a group whose GPUs can read
/// one another's memory (peer access) launches the same add_norm, in min(num_tokens, ctas) CTAs
/// (the same on every rank; at most one per SM of the smallest GPU, so that every CTA of every
/// rank can be resident at once and no CTA waits for one that cannot start). CTA b of each rank
/// signals CTA b of the others and waits for them (a barrier through `flags`), then reads its
/// rows of every rank's delta0 and adds their sum, taken in rank order so that every rank
/// computes the same bits. No second barrier is needed when the group alternates two delta
/// buffers (o and down projections): a rank overwrites a buffer only after the barrier of the
/// next add_norm, which no rank passes before every rank has finished the previous one.
/// Counters live in device memory, so the launches may be captured in CUDA graphs and replayed.
struct PeerSum {
  int world = 0;  // 0: off (delta0 is the whole sum)
  int rank = 0;
  int ctas = 1;   // CTAs of a launch at most (1 .. kMaxPeerCtas)
  const void* delta0[kMaxPeerRanks] = {};  // rank r's delta0 buffer (readable from this device)
  uint32_t* flags[kMaxPeerRanks] = {};     // rank r's arrivals [kMaxPeerRanks][kMaxPeerCtas], 0 at start
  uint32_t* epochs = nullptr;              // this rank's launches per CTA [kMaxPeerCtas], 0 at start
  const int* abort = nullptr;  // optional host-mapped flag: nonzero ends every wait (a failed group)
};

/// The residual add of one sub-layer fused with the norm of the next (pre-norm structure):
///   r = residual[row] (+ delta0[row] + bias0) (+ delta1[row] + bias1)  (fp32)
///   residual[row] = r                                                  (when any delta is given)
///   out0[i] = norm(r) * weight0 (+ norm_bias0)                         (dtype)
///   out1[i] = norm(r) * weight1 (+ norm_bias1)                         (optional)
/// for i < num_tokens, with row = rows ? rows[i] : i (the final norm gathers only the rows whose
/// logits are needed; residual and deltas are indexed by row, outputs by i);
/// rms: r / sqrt(mean(r^2) + eps); layer: (r - mean) / sqrt(var + eps).
/// GPT-NeoX's parallel residual passes both sub-layer outputs (delta0, delta1) and both norms.
/// With `peers` on (tensor parallelism), delta0 is this rank's partial sum of a row-parallel
/// projection and the kernel is the layer's all-reduce too (PeerSum).
struct AddNormParams {
  DType dtype = DType::kF16;
  NormType type = NormType::kRms;
  float eps = 1e-5f;
  int num_tokens = 0, hidden = 0;
  float* residual = nullptr;                                // [*, hidden] fp32
  const void* delta0 = nullptr; const void* bias0 = nullptr;  // [*, hidden] (indexed by row), [hidden]
  const void* delta1 = nullptr; const void* bias1 = nullptr;
  const void* weight0 = nullptr; const void* norm_bias0 = nullptr;  // [hidden]
  void* out0 = nullptr;                                     // [num_tokens, hidden]
  const void* weight1 = nullptr; const void* norm_bias1 = nullptr;
  void* out1 = nullptr;                                     // optional
  const int32_t* rows = nullptr;                            // optional [num_tokens] gather of residual rows
  /// Optional: out0's rows also as e4m3 with one scale per row, exactly as launch_quantize_fp8
  /// (ActQuantMode::kPerToken, dynamic) would quantize out0 (max |value as stored| / 448), for
  /// the W8A8 GEMM that reads them. out0_fp8 [num_tokens, hidden] (8-byte aligned rows), scales
  /// [num_tokens]; hidden % 8 == 0. With out0_fp8, out0 may be null: only the e4m3 rows are
  /// written (the GEMM reads nothing else).
  uint8_t* out0_fp8 = nullptr;
  float* out0_scales = nullptr;
  /// Tensor parallel: delta0 summed over the ranks (delta0 == peers.delta0[peers.rank]; no
  /// delta1).
  PeerSum peers;
};
cudaError_t launch_add_norm(const AddNormParams& p, cudaStream_t stream);

enum class ActKind : int { kSiluMul = 0, kGeluErf = 1, kGeluTanh = 2 };

/// kSiluMul: out[t, i] = silu(in[t, i] + b[i]) * (in[t, I + i] + b[I + i]), in [T, 2I] (gate | up).
/// kGelu*:   out[t, i] = gelu(in[t, i] + b[i]), in [T, I]. out may alias in for gelu.
struct ActivationParams {
  DType dtype = DType::kF16;
  ActKind kind = ActKind::kSiluMul;
  int num_tokens = 0, width = 0;  // width = I
  const void* in = nullptr;
  const void* bias = nullptr;     // optional: [2I] for kSiluMul, [I] for gelu
  void* out = nullptr;            // [T, I]
  /// kSiluMul: gate and up alternate in tiles of 8 along the row (and the bias), as
  /// GemvEpilogue::kSiluMul's weight rows, instead of the row's halves. Needs width % 8 == 0.
  bool interleaved = false;
  /// Optional: the output rows as e4m3 with one dynamic scale per row, the bytes and scales
  /// launch_quantize_fp8 (ActQuantMode::kPerToken) makes of the T rows, for the W8A8 GEMM that
  /// reads them; out may then be null (only the e4m3 rows are written). out_fp8 [num_tokens,
  /// width] (8-byte aligned), out_scales [num_tokens]; width % 8 == 0 and at most
  /// kActivationFp8MaxWidth, in / bias / out 16-byte aligned.
  uint8_t* out_fp8 = nullptr;
  float* out_scales = nullptr;
};
/// The widest row ActivationParams::out_fp8 takes (one CTA holds a row in shared memory).
inline constexpr int kActivationFp8MaxWidth = 16384;
cudaError_t launch_activation(const ActivationParams& p, cudaStream_t stream);

/// Copies the K and V of each token (from the qkv rows, already rotated) into the paged cache at
/// cache_slot[t] (= block * block_size + offset); tokens with cache_slot[t] < 0 are skipped.
struct KvWriteParams {
  DType dtype = DType::kF16;
  int num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const void* qkv = nullptr;          // [num_tokens, qkv_stride]: q | k | v
  int qkv_stride = 0;                 // elements per row, >= (num_heads + 2 * num_kv_heads) * head_dim
  const int32_t* cache_slot = nullptr;  // [num_tokens]
  void* cache = nullptr;              // this layer's cache
  KvCacheLayout layout;
};
cudaError_t launch_kv_write(const KvWriteParams& p, cudaStream_t stream);

}  // namespace rill::kernels
