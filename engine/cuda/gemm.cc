#include "engine/cuda/gemm.h"

#include <algorithm>
#include <vector>

#include "rill/kernels/gemv.h"

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

int Gemm::gemv_max_m(int N, int K, bool y_f32) const {
  auto it = gemv_max_m_.find({N, K, y_f32});
  return it == gemv_max_m_.end() ? 0 : it->second;
}

void Gemm::run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32) {
  // Column-major view: y^T [N, M] = w [N, K] (row-major = K x N col-major, transposed) * x^T.
  const cudaDataType_t t = dtype_ == kernels::DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float one = 1.0f, zero = 0.0f;
  RILL_CUBLAS(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, t, K, x, t, K, &zero, y,
                           y_f32 ? CUDA_R_32F : t, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void Gemm::run(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32) {
  if (M <= 0) return;
  if (gemv_enabled_ && M <= gemv_max_m(N, K, y_f32)) {
    kernels::GemvParams p;
    p.dtype = dtype_;
    p.M = M;
    p.N = N;
    p.K = K;
    p.x = x;
    p.w = w;
    p.y = y;
    p.y_f32 = y_f32;
    RILL_CUDA(kernels::launch_gemv(p, stream_));
    return;
  }
  run_cublas(x, w, y, M, N, K, y_f32);
}

void Gemm::tune(const void* w, int N, int K, bool y_f32, void* scratch_x, void* scratch_y) {
  if (K % 8 != 0) return;  // the GEMV kernel needs 16-byte rows
  cudaEvent_t a, b;
  RILL_CUDA(cudaEventCreate(&a));
  RILL_CUDA(cudaEventCreate(&b));
  auto time = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> ms(9);
    for (float& m : ms) {
      RILL_CUDA(cudaEventRecord(a, stream_));
      fn();
      RILL_CUDA(cudaEventRecord(b, stream_));
      RILL_CUDA(cudaEventSynchronize(b));
      RILL_CUDA(cudaEventElapsedTime(&m, a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[4];
  };
  int best = 0;
  for (int M = 1; M <= 8; ++M) {
    kernels::GemvParams p;
    p.dtype = dtype_;
    p.M = M;
    p.N = N;
    p.K = K;
    p.x = scratch_x;
    p.w = w;
    p.y = scratch_y;
    p.y_f32 = y_f32;
    bool gemv_ok = true;
    const float g = time([&] {
      if (kernels::launch_gemv(p, stream_) != cudaSuccess) gemv_ok = false;
    });
    const float c = time([&] { run_cublas(scratch_x, w, scratch_y, M, N, K, y_f32); });
    if (!gemv_ok) break;
    if (g < c) best = M;
    else break;
  }
  cudaGetLastError();
  RILL_CUDA(cudaEventDestroy(a));
  RILL_CUDA(cudaEventDestroy(b));
  gemv_max_m_[{N, K, y_f32}] = best;
}

}  // namespace rill::cuda
