#include "engine/cuda/gemm.h"

#include <cstdint>

namespace rill::cuda {

Gemm::Gemm(kernels::DType dtype, cudaStream_t stream) : dtype_(dtype), stream_(stream) {
  RILL_CUBLAS(cublasCreate(&handle_));
  RILL_CUBLAS(cublasSetStream(handle_, stream));
  // A fixed workspace: cuBLAS must not allocate while a CUDA graph is being captured.
  workspace_ = DeviceMemory(32u << 20, "cuBLAS workspace");
  RILL_CUBLAS(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()));
  RILL_CUBLAS(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
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
  RILL_CUBLAS(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, t, K, x, t, K, &zero, y,
                           y_f32 ? CUDA_R_32F : t, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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

}  // namespace rill::cuda
