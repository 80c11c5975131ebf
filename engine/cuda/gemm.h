// y[M, N] = x[M, K] * w[N, K]^T for the CUDA runner: Rill's GEMV kernel for M <= 8 (decode;
// faster than cuBLAS at every Llama shape and M <= 8 on H100, docs/performance-history.md) and
// cuBLAS (tensor cores, fp32 accumulation) otherwise. fp8 weights: the weight-only fp8 GEMV up to
// fp8_gemv_max_rows rows, else x quantized to e4m3 (per token, or per token and 128 columns with
// block-scaled weights) and a cuBLASLt e4m3 x e4m3 GEMM (gemm_fp8.h); where cuBLASLt has no
// algorithm, the GEMV 16 rows at a time. The choice depends only on the operands, never on
// timings, so every run computes bit-identical results. Steps with prefill run the GEMMs at
// their rows rounded up to a bucket (padded_rows, run's pad_to): the rows past the step's are
// scratch. Safe inside CUDA-graph capture (fixed workspaces).
#pragma once

#include <memory>
#include <optional>

#include "engine/cuda/cuda_util.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/gemm_fp8.h"
#include "rill/kernels/common.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"

namespace rill::cuda {

class Gemm {
 public:
  Gemm(kernels::DType dtype, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Enqueues y = x w^T on the stream. y is dtype, or fp32 when y_f32. deep_prologue: see
  /// kernels::GemvParams (used when the GEMV runs).
  /// `config`: the GEMV's CTA shape (-1: the forced or default one).
  void run(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32 = false,
           bool deep_prologue = false, int config = -1);
  /// The same for a weight that may be fp8 (`config`: the GEMV's shape, a kernels::gemv_fp8 one
  /// for fp8 weights, where -1 takes set_fp8_gemv_config's or set_fp8_deep_config's;
  /// deep_prologue: kernels::Fp8GemvParams's for them). `pad_to` > M
  /// (padded_rows): the GEMM runs at pad_to rows, whose rows past M are scratch (x and y have
  /// room for them; their inputs may hold anything, non-finite values too, and their outputs are
  /// garbage): the 16-bit GEMM at pad_to rows, the W8A8 GEMM at the leading rows of pad_to that
  /// cuBLASLt takes (fp8_gemm_rows(pad_to)), and the fp8 GEMV only on real rows past those.
  void run(const void* x, const DeviceLinear& w, void* y, int M, int N, int K, bool y_f32 = false,
           bool deep_prologue = false, int config = -1, int pad_to = 0);
  /// The rows a step of T tokens runs its GEMM over w at (pad_to above): in a step with prefill
  /// that the GEMV does not take, T rounded up to a multiple of `bucket`, so that cuBLAS and
  /// cuBLASLt meet a few shapes, all of them met at start (CudaRunner::warm_up_gemms), instead of
  /// a new one, and its host time, for every chunk size; else T (decode-only steps and the
  /// GEMV's). The one rule for the runner and for tests that emulate its fp8 layers. 16-bit
  /// weights: the GEMV takes T <= 8 rows while it is enabled (as uses_gemv, less its alignment
  /// checks); fp8 weights: uses_gemv.
  int padded_rows(int T, bool prefill, int bucket, const void* x, const DeviceLinear& w,
                  int K) const;
  /// Meets the GEMM shape run() takes for M rows, without computing anything anyone reads: the
  /// 16-bit GEMM at M rows, or for fp8 weights the cuBLASLt plans fp8_gemm_rows(M) asks for and
  /// the W8A8 GEMM (with its quantization) on the rows it takes; x's rows may hold anything.
  /// Returns the rows the GEMM took: M, fewer (fp8: the GEMV would take the rest; it has no
  /// per-shape cost), or 0 (the GEMV takes them all).
  int warm_up(const void* x, const DeviceLinear& w, void* y, int M, int N, int K, bool y_f32);
  /// Where the W8A8 GEMM that run(x, w, .., M, N, K, .., pad_to) would enqueue reads x's rows as
  /// e4m3 (per token, scales [M]): a kernel that writes them there itself (the norm that
  /// produces x, kernels::AddNormParams::out0_fp8) and then calls prequantized(x, M) spares that
  /// GEMM its quantization kernel. nullopt where run() would not read them so: the GEMV, 128 x
  /// 128 block scales, a static input scale, or rows cuBLASLt does not take.
  struct Fp8Input {
    uint8_t* x;
    float* scales;
  };
  std::optional<Fp8Input> fp8_input(const void* x, const DeviceLinear& w, int M, int pad_to, int N,
                                    int K);
  /// x's leading `rows` rows are in fp8_input's buffers. Holds for the next GEMM or GEMV call
  /// only, and only where that call's input is x.
  void prequantized(const void* x, int rows);
  /// Enqueues Rill's GEMV with its epilogue options (p.dtype is filled in).
  void gemv(kernels::GemvParams p);
  /// Enqueues the fp8 GEMV (p.dtype and, when p.config < 0, the forced shape filled in:
  /// set_fp8_gemv_config's, else set_fp8_deep_config's when p.deep_prologue).
  void gemv_fp8(kernels::Fp8GemvParams p);
  /// `first` then `second` (which reads first's output), as gemv_fp8 each, through
  /// kernels::launch_gemv_fp8_pair: one kernel where it takes them. `barrier`: its device memory.
  void gemv_fp8_pair(kernels::Fp8GemvParams first, kernels::Fp8GemvParams second, void* barrier);
  /// The fp8 GEMV's parameters for weight w (dtype, shapes, scales; kStore).
  kernels::Fp8GemvParams fp8_gemv_params(const void* x, const DeviceLinear& w, void* y, int M,
                                         int N, int K, bool y_f32) const;
  /// Room for activations quantized to e4m3: up to `max_rows` x `max_k` (the W8A8 GEMMs).
  void reserve_fp8(int max_rows, int max_k);
  /// fp8 weights: the GEMV takes up to this many rows (1 .. kernels::kFp8GemvMaxRows), the
  /// W8A8 GEMM more; 0: always the GEMM where cuBLASLt has one.
  void set_fp8_gemv_max_rows(int rows) { fp8_gemv_max_rows_ = rows; }
  /// The W8A8 GEMMs over per-row-scaled weights with cuBLASLt's fast accumulation
  /// (Fp8Gemm::Problem::fast_accum); block-scaled ones rescale every 128 columns anyway.
  void set_fp8_fast_accum(bool on) { fp8_fast_accum_ = on; }
  /// The fp8 GEMV's CTA shape (kernels::gemv_fp8_config_info; -1: the default rule).
  void set_fp8_gemv_config(int config) { fp8_gemv_config_ = config; }
  /// The fp8 GEMV's CTA shape with deep_prologue (-1: the default rule).
  void set_fp8_deep_config(int config) { fp8_deep_config_ = config; }
  /// Disables the GEMV path (cuBLAS for everything), e.g. to measure what it buys.
  void set_gemv_enabled(bool on) { gemv_enabled_ = on; }
  /// The GEMV's CTA shape (kernels::gemv_config_info) for every GEMV that does not name one;
  /// -1: kernels::gemv_default_config. A shape without kSiluMul keeps the default for those.
  void set_gemv_config(int config) { gemv_config_ = config; }
  /// The same for the GEMVs with deep_prologue (before set_gemv_config's shape); -1: the default.
  void set_deep_config(int config) { deep_config_ = config; }
  /// The CTA shape gemv() launches for weights [N, K] when the caller names none (the forced one,
  /// or the default rule).
  int gemv_config(int N, int K, bool deep_prologue) const;
  /// True when run() takes the GEMV kernel for these operands.
  bool uses_gemv(const void* x, const void* w, int M, int K) const;
  bool uses_gemv(const void* x, const DeviceLinear& w, int M, int K) const;
  /// How many leading rows of x run() puts through the W8A8 fp8 GEMM when the GEMM runs at M rows
  /// (run's pad_to where it pads, else its M): Fp8Gemm::rows; the rest of the real rows go
  /// through the fp8 GEMV in tiles of 16 rows. 0 for the GEMV path and non-fp8 weights.
  int fp8_gemm_rows(const void* x, const DeviceLinear& w, int M, int N, int K, bool y_f32);

 private:
  // The shape set_deep_config / set_gemv_config forced on GEMVs with or without a deep
  // prologue (-1: none).
  int forced_config(bool deep_prologue) const {
    return deep_prologue && deep_config_ >= 0 ? deep_config_ : gemv_config_;
  }
  void run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32);
  // p.dtype, and the forced shape where p.config < 0 (gemv_fp8's rule).
  void resolve_fp8_gemv(kernels::Fp8GemvParams& p) const;
  Fp8Gemm::Problem fp8_problem(const DeviceLinear& w, int M, int N, int K, bool y_f32) const {
    const bool block = w.scale_layout == kernels::Fp8ScaleLayout::kBlock128;
    return {M, N, K, block, dtype_, y_f32, fp8_fast_accum_ && !block};
  }
  // fp8 weights: the W8A8 GEMM on the leading rows of `padded` (>= M) cuBLASLt takes, the GEMV in
  // tiles of 16 rows on the real rows (< M) past those.
  void run_fp8_gemm(const void* x, const DeviceLinear& w, void* y, int M, int padded, int N, int K,
                    bool y_f32, int prequantized_rows = 0);
  // x's leading `rows` rows quantized to e4m3 and the W8A8 GEMM on them (rows from
  // fp8_gemm_rows).
  // `quantized`: x's real rows are in fp8_x_ already (prequantized).
  void fp8_gemm(const void* x, const DeviceLinear& w, void* y, int rows, int N, int K, bool y_f32,
                bool quantized);
  kernels::DType dtype_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceMemory workspace_;
  bool gemv_enabled_ = true;
  int gemv_config_ = -1;
  int deep_config_ = -1;
  int fp8_gemv_max_rows_ = kernels::kFp8GemvMaxRows;
  bool fp8_fast_accum_ = false;
  int fp8_gemv_config_ = -1;
  int fp8_deep_config_ = -1;
  std::unique_ptr<Fp8Gemm> fp8_gemm_;
  DeviceMemory fp8_x_;       // [max rows, max K] e4m3
  DeviceMemory fp8_scales_;  // [ceil(max K / 128), max rows] fp32
  int fp8_max_rows_ = 0, fp8_max_k_ = 0;
  const void* prequant_x_ = nullptr;  // prequantized(): for the next call only
  int prequant_rows_ = 0;
};

}  // namespace rill::cuda
