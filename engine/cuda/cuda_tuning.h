// The CUDA runner's tuning knobs in one struct: given at construction (EngineOptions::cuda_tuning)
// and replaced as a whole with CudaRunner::set_tuning, which re-captures the CUDA graphs. The
// defaults are what serving runs; rill-bench and tests change them to measure what each is worth
// or to check that it changes no result. Every default was chosen by H100 measurements
// (docs/performance-history.md). Plain C++: CPU builds carry it inside EngineOptions.
#pragma once

#include <array>
#include <bit>

namespace rill {

/// RoPE inside decode attention (kernels::DecodeRope): the runner's rule, or forced.
enum class RopeInAttention { kAuto, kOff, kOn };

struct CudaTuning {
  /// The decode GEMVs that can be tuned on their own, one bit each (masks and
  /// projection_gemv_config): fused q | k | v, attention output, gate | up (or up), down, LM head.
  static constexpr int kQkv = 1, kO = 2, kUp = 4, kDown = 8, kHead = 16;
  static constexpr int kAllProjections = 31;
  static constexpr int kNumProjections = 5;
  /// Index of one projection bit in projection_gemv_config.
  static constexpr int projection_index(int projection) {
    return std::countr_zero(static_cast<unsigned>(projection));
  }

  /// Replay decode steps as CUDA graphs per batch bucket: removes ~300 launches' host cost a step.
  bool cuda_graphs = true;
  /// With cuda_graphs: capture the graph of every (batch bucket, attention split count) the
  /// split policy can produce at construction (CudaRunner::precapture_graphs, timed in the log),
  /// so that no step meets a capture; off: each is captured by the first step that needs it.
  /// Steps with log-probabilities still capture theirs on first use.
  bool precapture_graphs = false;
  /// Offloads of idle sessions' caches copy on the copy stream, beside the steps, instead of on
  /// the compute stream before the next step; the sequence keeps its pool blocks until the copy
  /// is done (ModelRunner::releasing_blocks counts them meanwhile). Off: the copy runs on the
  /// compute stream and the blocks are free at once (ordered by the stream).
  bool async_offload = false;
  /// Rill's GEMV for steps of <= 8 tokens (off: cuBLAS for every GEMM); faster than cuBLAS at
  /// every Llama shape there.
  bool gemv = true;
  /// Every GEMV forced to this CTA shape (kernels::gemv_config_info; -1: kernels::
  /// gemv_default_config per shape, the measured best).
  int gemv_config = -1;
  /// Mask of the decode GEMVs that stage weights through a shared-memory ring (kernels::
  /// GemvParams::deep_prologue); all by default: each gained on 7B / 8B shapes.
  int gemv_deep_mask = kAllProjections;
  /// The CTA shape of the GEMVs with a deep prologue (-1: the default rule).
  int gemv_deep_config = -1;
  /// Per projection (at projection_index(kQkv .. kHead)): that GEMV's CTA shape; -1: as the
  /// others (gemv_config, gemv_deep_config, or the runner's measured ring depth per projection).
  std::array<int, kNumProjections> projection_gemv_config = {-1, -1, -1, -1, -1};
  /// SiLU-and-mul inside the gate|up GEMV of steps of <= 8 tokens (off: its own kernel after
  /// the GEMV); saves a kernel and a round trip of the activations per layer.
  bool fused_decode = true;
  /// Decode attention's split count (0: the automatic policy, one split up to 256 keys and
  /// about one per 64 keys beyond, measured best at batch 1); 1 .. 16 forces one.
  int decode_splits = 0;
  /// The automatic policy's cap: splits x sequences x KV heads <= this many CTAs an SM (1 .. 8).
  /// 4 was measured best at batch 1; at fp8 batch 2 on the 7B shape 2 would pick 4 splits, which
  /// ran 0.1 ms faster than the cap's 8 (docs/performance.md F18), unmeasured elsewhere.
  int decode_split_ctas_per_sm = 4;
  /// Decode attention issues its first K/V loads before waiting for the previous kernel
  /// (kernels::DecodeAttentionParams::early_kv_loads): overlaps them with its predecessor.
  bool early_kv_loads = true;
  /// Decode attention merges its splits in a thread-block cluster (kernels::
  /// DecodeAttentionParams::cluster_merge), not through a global workspace: shorter tail.
  bool cluster_merge = true;
  /// RoPE and the newest K/V write inside decode attention; kAuto: on when attention runs in
  /// several splits, for models without GQA and, on the tensor-core kernel, for GQA steps of 1
  /// or 2 sequences, where it was measured to pay (CudaRunner::rope_in_attention).
  RopeInAttention rope_in_attention = RopeInAttention::kAuto;
  /// Decode attention on tensor cores (kernels::DecodeAttentionParams::use_mma): -1 where the
  /// kernel takes the shapes (GQA groups of 4 to 8), 0 never, 1 wherever it
  /// takes them (as -1 today; kept apart so measurements can name the choice).
  int decode_mma = -1;
  /// fp8 weights: steps of up to this many tokens run the weight-only fp8 GEMV (1 .. 16), larger
  /// ones quantize activations and run the cuBLASLt fp8 GEMM; 0: the GEMM always.
  int fp8_gemv_max_rows = 16;
  /// The fp8 GEMV's CTA shape (kernels::gemv_fp8_config_info; -1:
  /// kernels::gemv_fp8_default_config).
  int fp8_gemv_config = -1;
  /// Mask of the decode fp8 GEMVs that stage weights through a shared-memory ring (kernels::
  /// Fp8GemvParams::deep_prologue; 0 .. kAllProjections, a bit applies at every step size); -1:
  /// qkv, o, gate|up (or up) and down, the fastest set measured at batch 1 on the H100.
  int fp8_gemv_deep_mask = -1;
  /// The CTA shape of the fp8 GEMVs with a deep prologue (a kernels::gemv_fp8_config_info index;
  /// -1: kernels::gemv_fp8_default_config's, the persistent ring of 3), unless fp8_gemv_config
  /// forces one for all.
  int fp8_gemv_deep_config = -1;
  /// fp8 weights: the kernel that produces a W8A8 GEMM's input writes it as e4m3 per token
  /// itself, instead of in the model dtype: the norms before qkv and gate|up
  /// (kernels::AddNormParams::out0_fp8) and the activation before down
  /// (kernels::ActivationParams::out_fp8). The GEMM then runs without a quantization kernel of
  /// its own; the bytes are those that kernel writes (CudaFp8.FusedQuantizationChangesNothing).
  bool fp8_fused_quant = true;
  /// fp8 weights with per-row scales: the W8A8 GEMMs (prefill, decode batches past
  /// fp8_gemv_max_rows) accumulate with cuBLASLt's fast accumulation (Fp8Gemm::Problem::
  /// fast_accum) instead of promoting partial sums to fp32 periodically: the 7B's 2,048-token
  /// prefill 1.60-1.63x bf16 against 1.51-1.56x without (docs/performance.md F17).
  bool fp8_fast_accum = true;
  /// fp8 decode steps of 1 or 2 tokens (the GEMV path) of RMSNorm models: the residual add and
  /// the norm after attention's o and the MLP's down run inside those GEMVs and the GEMV that
  /// reads the norm (kernels::Fp8NormOut / Fp8NormIn) instead of as an add_norm kernel between
  /// them: two kernels fewer per layer (H100 batch 1: 7B 3.03 against 3.14 ms, 8B 3.50 against
  /// 3.58). Off: add_norm (the norm's output is rounded at another place: docs/quantization.md).
  bool fp8_norm_in_gemv = true;
  /// With fp8_norm_in_gemv: a layer's down projection and the next layer's qkv, which reads its
  /// norm, run as one kernel of persistent CTAs with a grid barrier between them
  /// (kernels::launch_gemv_fp8_pair) instead of two kernels, so qkv's CTAs need not find SMs
  /// after down's leave them (docs/quantization.md).
  bool fp8_pair_down_qkv = true;
  /// Tensor parallelism: steps of up to this many tokens (at most 16,384) on 2
  /// GPUs, this / (N - 1) on N, sum the o and down projections' partial sums over peer memory
  /// inside the residual add that follows them (kernels::PeerSum) when every pair of the group's
  /// GPUs has peer access; larger steps, and groups without peer access, use NCCL. Each rank
  /// reads N - 1 other ranks' rows, so the bound keeps what it reads the same. On 2 H200s the
  /// fused sum was faster than NCCL + add_norm at every size up to 512 tokens (docs/
  /// performance.md, P5). 0: NCCL always.
  int peer_sum_max_tokens = 512;
  /// Programmatic dependent launch (kernels::set_programmatic_launch): each kernel starts while
  /// its predecessor drains. Process-wide: the last runner constructed or re-tuned sets it.
  bool programmatic_launch = true;

  /// The same for fp8 weights' GEMV (kernels::gemv_fp8_config_info indices; -1: the deep
  /// prologue's or the default shape, as the other fp8 GEMVs).
  std::array<int, kNumProjections> fp8_projection_gemv_config = {-1, -1, -1, -1, -1};

  int& projection_config(int projection) {
    return projection_gemv_config[projection_index(projection)];
  }
  int projection_config(int projection) const {
    return projection_gemv_config[projection_index(projection)];
  }
  bool operator==(const CudaTuning&) const = default;
};

}  // namespace rill
