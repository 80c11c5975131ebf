#include "engine/cuda/gemm.h"

#include <utility>

#include <algorithm>
#include <cstdint>

#include "rill/kernels/quantize_fp8.h"

namespace rill::cuda {

Gemm::Gemm(kernels::DType dtype, cudaStream_t stream) : dtype_(dtype), stream_(stream) {
  RILL_CUBLAS(cublasCreate(&handle_));
  RILL_CUBLAS(cublasSetStream(handle_, stream));
  // A fixed workspace: cuBLAS must not allocate while a CUDA graph is being captured.
  workspace_ = DeviceMemory(32u << 20, "cuBLAS workspace");
  RILL_CUBLAS(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()));
  RILL_CUBLAS(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  // cuBLASLt shares the workspace: both run in stream order on `stream`.
  fp8_gemm_ = std::make_unique<Fp8Gemm>(stream, workspace_.get(), workspace_.bytes());
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

bool Gemm::uses_gemv(const void* x, const void* w, int M, int K) const {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return gemv_enabled_ && M <= 8 && K % 8 == 0 && aligned(x) && aligned(w);
}

void Gemm::run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32) {
  // Column-major view: y^T [N, M] = w [N, K] (row-major = K x N col-major, transposed) * x^T.
  const cudaDataType_t t = dtype_ == kernels::DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  RILL_CUBLAS(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, t, K, x, t, K,
                           &zero, y, y_f32 ? CUDA_R_32F : t, N, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
}

void Gemm::run(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32,
               bool deep_prologue, int config) {
  if (M <= 0) return;
  if (!uses_gemv(x, w, M, K)) {
    run_cublas(x, w, y, M, N, K, y_f32);
    return;
  }
  kernels::GemvParams p = kernels::gemv_params(dtype_, M, N, K, x, w, y);
  p.y_f32 = y_f32;
  p.deep_prologue = deep_prologue;
  p.config = config;
  gemv(p);
}

void Gemm::gemv(kernels::GemvParams p) {
  prequant_x_ = nullptr;
  p.dtype = dtype_;
  const int forced = forced_config(p.deep_prologue);
  if (p.config < 0 && forced >= 0 &&
      (p.epilogue != kernels::GemvEpilogue::kSiluMul || kernels::gemv_config_info(forced).silu))
    p.config = forced;
  RILL_CUDA(kernels::launch_gemv(p, stream_));
}

int Gemm::gemv_config(int N, int K, bool deep_prologue) const {
  const int forced = forced_config(deep_prologue);
  return forced >= 0 ? forced : kernels::gemv_default_config(N, K, deep_prologue);
}

void Gemm::reserve_fp8(int max_rows, int max_k) {
  fp8_max_rows_ = max_rows;
  fp8_max_k_ = max_k;
  const size_t groups = size_t(max_k + kernels::kFp8ScaleBlock - 1) / kernels::kFp8ScaleBlock;
  fp8_x_ = DeviceMemory(size_t(max_rows) * max_k, "fp8 activations");
  fp8_scales_ = DeviceMemory(groups * max_rows * sizeof(float), "fp8 activation scales");
}

bool Gemm::uses_gemv(const void* x, const DeviceLinear& w, int M, int K) const {
  if (!w.fp8()) return uses_gemv(x, w.w, M, K);
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return gemv_enabled_ && M <= fp8_gemv_max_rows_ && K % 16 == 0 && aligned(x) && aligned(w.w);
}

kernels::Fp8GemvParams Gemm::fp8_gemv_params(const void* x, const DeviceLinear& w, void* y, int M,
                                             int N, int K, bool y_f32) const {
  kernels::Fp8GemvParams p;
  p.dtype = dtype_;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = x;
  p.w = w.w;
  p.scale = w.scale;
  p.scale_layout = w.scale_layout;
  p.y = y;
  p.y_f32 = y_f32;
  return p;
}

void Gemm::resolve_fp8_gemv(kernels::Fp8GemvParams& p) const {
  p.dtype = dtype_;
  if (p.config < 0) p.config = fp8_gemv_config_;
  if (p.config < 0 && p.deep_prologue) p.config = fp8_deep_config_;
}

void Gemm::gemv_fp8(kernels::Fp8GemvParams p) {
  prequant_x_ = nullptr;
  resolve_fp8_gemv(p);
  RILL_CUDA(kernels::launch_gemv_fp8(p, stream_));
}

void Gemm::gemv_fp8_pair(kernels::Fp8GemvParams first, kernels::Fp8GemvParams second,
                         void* barrier) {
  prequant_x_ = nullptr;
  resolve_fp8_gemv(first);
  resolve_fp8_gemv(second);
  RILL_CUDA(kernels::launch_gemv_fp8_pair(first, second, barrier, stream_));
}

std::optional<Gemm::Fp8Input> Gemm::fp8_input(const void* x, const DeviceLinear& w, int M,
                                               int pad_to, int N, int K) {
  const int padded = std::max(M, pad_to);
  if (!w.fp8() || M <= 0 || w.scale_layout != kernels::Fp8ScaleLayout::kPerRow || w.input_scale ||
      K % 8 != 0 || fp8_gemm_rows(x, w, padded, N, K, false) < M)
    return std::nullopt;
  return Fp8Input{fp8_x_.as<uint8_t>(), fp8_scales_.as<float>()};
}

void Gemm::prequantized(const void* x, int rows) {
  prequant_x_ = x;
  prequant_rows_ = rows;
}

void Gemm::run(const void* x, const DeviceLinear& w, void* y, int M, int N, int K, bool y_f32,
               bool deep_prologue, int config, int pad_to) {
  // prequantized() holds for this call only.
  const int ready = std::exchange(prequant_x_, nullptr) == x ? prequant_rows_ : 0;
  // A producer that wrote only the e4m3 rows (fp8_input) leaves x unwritten: nothing else may
  // read it.
  if (ready > 0 && (!w.fp8() || uses_gemv(x, w, M, K)))
    throw Error(ErrorCode::kInternal, "gemm: prequantized input reached a 16-bit path");
  if (!w.fp8()) {
    run(x, w.w, y, std::max(M, pad_to), N, K, y_f32, deep_prologue, config);
    return;
  }
  if (M <= 0) return;
  if (uses_gemv(x, w, M, K)) {
    kernels::Fp8GemvParams p = fp8_gemv_params(x, w, y, M, N, K, y_f32);
    p.deep_prologue = deep_prologue;
    p.config = config;  // fp8 weights: a kernels::gemv_fp8_config_info index, or -1
    gemv_fp8(p);
    return;
  }
  run_fp8_gemm(x, w, y, M, std::max(M, pad_to), N, K, y_f32, ready);
}

int Gemm::padded_rows(int T, bool prefill, int bucket, const void* x, const DeviceLinear& w,
                      int K) const {
  const bool gemv = w.fp8() ? uses_gemv(x, w, T, K) : gemv_enabled_ && T <= 8;
  if (!prefill || gemv || bucket <= 1) return T;
  return (T + bucket - 1) / bucket * bucket;
}

int Gemm::warm_up(const void* x, const DeviceLinear& w, void* y, int M, int N, int K, bool y_f32) {
  if (M <= 0 || uses_gemv(x, w, M, K)) return 0;
  if (!w.fp8()) {
    run_cublas(x, w.w, y, M, N, K, y_f32);
    return M;
  }
  prequant_x_ = nullptr;
  const int rows = fp8_gemm_rows(x, w, M, N, K, y_f32);
  if (rows > 0) fp8_gemm(x, w, y, rows, N, K, y_f32, false);
  return rows;
}

int Gemm::fp8_gemm_rows(const void* x, const DeviceLinear& w, int M, int N, int K, bool y_f32) {
  if (!w.fp8() || M <= 0 || uses_gemv(x, w, M, K) || M > fp8_max_rows_ || K > fp8_max_k_) return 0;
  return fp8_gemm_->rows(fp8_problem(w, M, N, K, y_f32));
}

void Gemm::fp8_gemm(const void* x, const DeviceLinear& w, void* y, int rows, int N, int K,
                    bool y_f32, bool quantized) {
  const bool block = w.scale_layout == kernels::Fp8ScaleLayout::kBlock128;
  if (quantized) {  // the real rows are in fp8_x_ (fp8_input); the others are scratch
    fp8_gemm_->run(fp8_problem(w, rows, N, K, y_f32), fp8_x_.as<uint8_t>(),
                   fp8_scales_.as<float>(), w.w, w.scale, y);
    return;
  }
  kernels::QuantizeFp8Params q;
  q.dtype = dtype_;
  // scales [rows] or [ceil(K / 128), rows]. One CTA per row, each reading only its own row and
  // writing only its own bytes and scales, and the GEMM's output row m reads only x's row m and
  // its scales: scratch rows (run's pad_to), whatever they hold, change no real row.
  q.num_tokens = rows;
  q.width = K;
  q.x = x;
  q.out = fp8_x_.as<uint8_t>();
  q.scales = fp8_scales_.as<float>();
  // Block-scaled weights pair with 128-column activation groups (a static input scale is per
  // tensor and cannot be one of them: such layers quantize per group too).
  q.mode = block ? kernels::ActQuantMode::kPerGroup128 : kernels::ActQuantMode::kPerToken;
  if (!block) q.static_scale = w.input_scale;
  RILL_CUDA(kernels::launch_quantize_fp8(q, stream_));
  fp8_gemm_->run(fp8_problem(w, rows, N, K, y_f32), fp8_x_.as<uint8_t>(), fp8_scales_.as<float>(),
                 w.w, w.scale, y);
}

void Gemm::run_fp8_gemm(const void* x, const DeviceLinear& w, void* y, int M, int padded, int N,
                        int K, bool y_f32, int prequantized_rows) {
  const int gemm_rows = fp8_gemm_rows(x, w, padded, N, K, y_f32);
  const bool quantized = prequantized_rows >= std::min(M, gemm_rows) &&
                         w.scale_layout == kernels::Fp8ScaleLayout::kPerRow && !w.input_scale;
  if (prequantized_rows > 0 && (!quantized || gemm_rows < M))
    throw Error(ErrorCode::kInternal, "gemm: prequantized input the W8A8 GEMM does not take");
  if (gemm_rows > 0) fp8_gemm(x, w, y, gemm_rows, N, K, y_f32, quantized);
  // The other real rows through the GEMV, up to 16 rows of x and y at a time (weights read once
  // per tile); scratch rows past M are left alone.
  const size_t x_row = size_t(K) * 2, y_row = size_t(N) * (y_f32 ? 4 : 2);
  for (int m0 = gemm_rows; m0 < M; m0 += kernels::kFp8GemvMaxRows) {
    const int rows = std::min(kernels::kFp8GemvMaxRows, M - m0);
    gemv_fp8(fp8_gemv_params(static_cast<const char*>(x) + m0 * x_row, w,
                             static_cast<char*>(y) + m0 * y_row, rows, N, K, y_f32));
  }
}

}  // namespace rill::cuda
