// How a program asks for its model runner: device, dtypes, memory and the CUDA runner's tuning.
// The runners read it; make_runner (engine/runner_factory.h) chooses between them.
#pragma once

#include <cstdint>
#include <string>

#include "engine/cuda/cuda_tuning.h"

namespace rill {

struct EngineOptions {
  std::string device = "auto";       // auto | cpu | cuda
  int block_size = 16;               // tokens per KV block
  int cpu_threads = 0;               // CPU runner: 0 = all cores
  int64_t cpu_kv_cache_bytes = 256ll << 20;
  int64_t host_kv_cache_bytes = 1ll << 30;  // host memory for offloaded session caches (pinned
                                            // on the CUDA runner, allocated at start); 0: none
  double gpu_memory_fraction = 0.90; // CUDA runner: share of free memory for weights + KV pool
  std::string dtype = "auto";        // CUDA runner: auto | float16 | bfloat16
  int max_batch = 256;               // CUDA runner: most sequences in one step
  int max_step_tokens = 8192;        // CUDA runner: most tokens in one step (prefill chunks)
  std::string kv_cache_dtype = "auto";  // auto (the model's dtype) | fp8 (e4m3, scales 1; the CPU
                                        // runner rounds K/V through it to emulate the CUDA one)
  std::string quantization = "auto";  // decoder linear weights: auto (what the checkpoint says) |
                                      // fp8 (e4m3; per-channel scales at load where the
                                      // checkpoint has none) | none (the model dtype)
  CudaTuning cuda_tuning;            // CUDA runner: graphs, GEMV shapes, fusions (cuda_tuning.h)
};

}  // namespace rill
