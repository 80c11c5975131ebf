// CudaRunner's per-category CUDA-event timing of eager steps (rill-bench's breakdown), shared by
// the runner and its forward pass.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "engine/cuda/cuda_runner.h"

namespace rill {

// Records CUDA events around op categories of eager steps.
class CudaRunner::Profiler {
 public:
  enum Cat { kGemm, kAttention, kNorm, kSampling, kCount };
  explicit Profiler(cudaStream_t s) : stream_(s) {}
  ~Profiler() {
    for (auto& [a, b, c] : events_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  template <typename Fn>
  void time(Cat c, Fn&& fn) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream_);
    fn();
    cudaEventRecord(b, stream_);
    events_.push_back({a, b, c});
  }
  void collect(StepProfile& p) {
    for (auto& [a, b, c] : events_) {
      float ms = 0;
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms, a, b);
      (c == kGemm        ? p.gemm_ms
       : c == kAttention ? p.attention_ms
       : c == kNorm      ? p.norm_elementwise_ms
                         : p.sampling_ms) += ms;
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    events_.clear();
  }

 private:
  struct Rec {
    cudaEvent_t a, b;
    Cat c;
  };
  cudaStream_t stream_;
  std::vector<Rec> events_;
};

template <typename Fn>
void CudaRunner::timed(int category, Fn&& fn) {
  if (profiler_) {
    profiler_->time(static_cast<Profiler::Cat>(category), fn);
  } else {
    fn();
  }
}

}  // namespace rill
