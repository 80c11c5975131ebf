#include "engine/cuda/cuda_util.h"

#include <utility>

#include "rill/kernels/common.h"

namespace rill::cuda {

void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  std::string msg = std::string(what) + " failed: " + cudaGetErrorString(err);
  const char* detail = kernels::last_kernel_error_detail();
  if (err == cudaErrorInvalidValue && detail && *detail) msg += " (" + std::string(detail) + ")";
  msg += " [" + std::string(file) + ":" + std::to_string(line) + "]";
  throw Error(err == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal, msg);
}

void throw_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  throw Error(st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
              std::string(what) + " failed: " + cublasGetStatusString(st) + " [" + file + ":" + std::to_string(line) + "]");
}

namespace {

cudaError_t allocate(MemoryKind kind, void** p, size_t bytes) {
  return kind == MemoryKind::kDevice ? cudaMalloc(p, bytes) : cudaMallocHost(p, bytes);
}
void release(MemoryKind kind, void* p) {
  if (!p) return;
  if (kind == MemoryKind::kDevice) {
    cudaFree(p);
  } else {
    cudaFreeHost(p);
  }
}

}  // namespace

template <MemoryKind Kind>
CudaBuffer<Kind>::CudaBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t err = allocate(Kind, &ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    throw Error(ErrorCode::kResourceExhausted,
                std::string("cannot allocate ") + std::to_string(bytes >> 20) + " MiB of " +
                    (Kind == MemoryKind::kDevice ? "GPU" : "pinned host") + " memory for " + what +
                    ": " + cudaGetErrorString(err));
  }
}

template <MemoryKind Kind>
CudaBuffer<Kind>::~CudaBuffer() {
  release(Kind, ptr_);
}

template <MemoryKind Kind>
CudaBuffer<Kind>& CudaBuffer<Kind>::operator=(CudaBuffer&& o) noexcept {
  if (this != &o) {
    release(Kind, ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

template class CudaBuffer<MemoryKind::kDevice>;
template class CudaBuffer<MemoryKind::kPinned>;

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

cudaEvent_t Event::get() {
  if (!event_) RILL_CUDA(cudaEventCreate(&event_));
  return event_;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace rill::cuda
