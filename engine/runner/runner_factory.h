// Chooses and builds a runner for a model: the CUDA runner when a GPU is present (and Rill was
// built with CUDA), otherwise the CPU reference runner.
#pragma once

#include <memory>
#include <string>

#include "engine/model/model.h"
#include "engine/runner/runner.h"

namespace rill {

struct EngineOptions {
  std::string device = "auto";       // auto | cpu | cuda
  int block_size = 16;               // tokens per KV block
  int cpu_threads = 0;               // CPU runner: 0 = all cores
  int64_t cpu_kv_cache_bytes = 256ll << 20;
  double gpu_memory_fraction = 0.90; // CUDA runner: share of free memory for weights + KV pool
  std::string dtype = "auto";        // CUDA runner: auto | float16 | bfloat16
  int max_batch = 256;               // CUDA runner: most sequences in one step
  int max_step_tokens = 8192;        // CUDA runner: most tokens in one step (prefill chunks)
  bool cuda_graphs = true;           // CUDA runner: replay decode steps as CUDA graphs
  bool fused_decode = true;          // CUDA runner: SiLU-and-mul inside the decode gate|up GEMV
  std::string kv_cache_dtype = "auto";  // auto (the model's dtype) | fp8 (e4m3, scales 1; the CPU
                                        // runner rounds K/V through it to emulate the CUDA one)
};

/// True when this build has CUDA and a device is visible.
bool cuda_available();

/// Builds the runner `options.device` names ("auto": CUDA when available). Throws
/// kUnsupported when CUDA is asked for but unavailable.
std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& options);

}  // namespace rill
