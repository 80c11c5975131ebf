// CUDA error handling and RAII memory for the CUDA runner. Failures become rill::Error
// (kInternal, or kResourceExhausted for out-of-memory) naming the call and the reason.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "engine/error.h"

namespace rill::cuda {

[[noreturn]] void throw_cuda(cudaError_t err, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t st, const char* what, const char* file, int line);

#define RILL_CUDA(expr)                                                              \
  do {                                                                               \
    cudaError_t rill_err_ = (expr);                                                  \
    if (rill_err_ != cudaSuccess) ::rill::cuda::throw_cuda(rill_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define RILL_CUBLAS(expr)                                                            \
  do {                                                                               \
    cublasStatus_t rill_st_ = (expr);                                                \
    if (rill_st_ != CUBLAS_STATUS_SUCCESS) ::rill::cuda::throw_cublas(rill_st_, #expr, __FILE__, __LINE__); \
  } while (0)

enum class MemoryKind { kDevice, kPinned };

/// A device allocation (cudaMalloc) or page-locked host memory for asynchronous copies
/// (cudaMallocHost), freed on destruction. Out of memory throws kResourceExhausted naming `what`.
template <MemoryKind Kind>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  explicit CudaBuffer(size_t bytes, const char* what = "buffer");
  ~CudaBuffer();
  CudaBuffer(CudaBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceMemory = CudaBuffer<MemoryKind::kDevice>;
using PinnedMemory = CudaBuffer<MemoryKind::kPinned>;

/// A CUDA event for timing, created on first use (so members need no device at construction).
class Event {
 public:
  Event() = default;
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get();

 private:
  cudaEvent_t event_ = nullptr;
};

/// Number of visible CUDA devices (0 when the driver is missing).
int cuda_device_count();

}  // namespace rill::cuda
