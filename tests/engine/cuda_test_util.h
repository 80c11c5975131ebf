// Shared by the CUDA runner's GPU tests: the skip where no GPU exists, and a small runner.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/runner_factory.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#endif

/// GPU tests skip visibly where no GPU exists; they run on the GPU machine before changes land.
#define REQUIRE_CUDA() \
  if (!::rill::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"

#ifdef RILL_HAVE_CUDA
namespace rill::testing {

/// A CUDA runner for tests: 16 sequences, 2,048 tokens a step, 30% of the GPU's memory.
inline std::unique_ptr<CudaRunner> cuda_runner(const Model& m, bool graphs = true,
                                               const std::string& kv_cache_dtype = "auto",
                                               CudaTuning tuning = {},
                                               const std::string& quantization = "auto") {
  EngineOptions o;
  o.quantization = quantization;
  o.device = "cuda";
  o.max_batch = 16;
  o.max_step_tokens = 2048;
  o.gpu_memory_fraction = 0.3;
  tuning.cuda_graphs = graphs;
  o.cuda_tuning = tuning;
  o.kv_cache_dtype = kv_cache_dtype;
  return std::make_unique<CudaRunner>(m, o);
}

}  // namespace rill::testing
#endif
