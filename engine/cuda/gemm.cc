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
  auto it = gemv_.find({N, K, y_f32});
  return it == gemv_.end() ? 0 : it->second.max_m;
}

int Gemm::gemv_config(int N, int K, bool y_f32) const {
  auto it = gemv_.find({N, K, y_f32});
  return it == gemv_.end() ? -1 : it->second.config;
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
  auto choice = gemv_.find({N, K, y_f32});
  if (gemv_enabled_ && choice != gemv_.end() && M <= choice->second.max_m) {
    kernels::GemvParams p;
    p.config = choice->second.config;
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

void Gemm::tune(const std::vector<const void*>& ws, int N, int K, bool y_f32, void* scratch_x,
                void* scratch_y) {
  if (K % 8 != 0 || ws.empty()) return;  // the GEMV kernel needs 16-byte rows
  cudaEvent_t a, b;
  RILL_CUDA(cudaEventCreate(&a));
  RILL_CUDA(cudaEventCreate(&b));
  size_t next = 0;
  auto weights = [&] { return ws[next++ % ws.size()]; };
  // Median of 15 timed calls after 3 untimed ones; false when a launch failed.
  auto time = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> ms(15);
    for (float& m : ms) {
      RILL_CUDA(cudaEventRecord(a, stream_));
      fn();
      RILL_CUDA(cudaEventRecord(b, stream_));
      RILL_CUDA(cudaEventSynchronize(b));
      RILL_CUDA(cudaEventElapsedTime(&m, a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  kernels::GemvParams p;
  p.dtype = dtype_;
  p.N = N;
  p.K = K;
  p.x = scratch_x;
  p.y = scratch_y;
  p.y_f32 = y_f32;
  bool gemv_ok = true;
  auto gemv = [&] {
    p.w = weights();
    if (kernels::launch_gemv(p, stream_) != cudaSuccess) gemv_ok = false;
  };
  GemvChoice choice;
  p.M = 1;
  float best_ms = 0;
  for (int config = 0; config < kernels::gemv_num_configs(); ++config) {
    p.config = config;
    const float ms = time(gemv);
    if (config == 0 || ms < best_ms) {
      best_ms = ms;
      choice.config = config;
    }
  }
  p.config = choice.config;
  for (int M = 1; M <= 8 && gemv_ok; ++M) {
    p.M = M;
    const float g = time(gemv);
    const float c = time([&] { run_cublas(scratch_x, weights(), scratch_y, M, N, K, y_f32); });
    if (!gemv_ok || g >= c) break;
    choice.max_m = M;
  }
  cudaGetLastError();
  RILL_CUDA(cudaEventDestroy(a));
  RILL_CUDA(cudaEventDestroy(b));
  gemv_[{N, K, y_f32}] = choice;
}

}  // namespace rill::cuda
