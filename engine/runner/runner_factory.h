// Chooses and builds a runner for a model: the CUDA runner when a GPU is present (and Rill was
// built with CUDA) and its kernels take the model's shapes, otherwise the CPU reference runner.
#pragma once

#include <memory>
#include <string>

#include "engine/cuda/cuda_tuning.h"
#include "engine/model/model.h"
#include "engine/runner/runner.h"

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
  /// Tensor parallelism (docs/tensor_parallel.md): the model split over this many GPUs of the
  /// host, one rank each; 1: one runner. With --device cpu, ranks emulated on CPU threads.
  int tensor_parallel_size = 1;
  /// The GPUs of the ranks, "0,1" (each visible, once, as many as tensor_parallel_size); empty:
  /// devices 0 .. N-1. Given with a size of 1, the one GPU the runner uses.
  std::string gpus;
};

/// True when this build has CUDA and a device is visible.
bool cuda_available();

/// Which runner make_runner builds for a model, and why "auto" did not take the GPU.
struct DeviceChoice {
  bool cuda = false;
  std::string fallback_reason;  // "auto" with a device present but a model it cannot run: why
};

/// make_runner's policy, usable without a GPU (`cuda_present`: cuda_available()):
///   "cpu":  the CPU runner;
///   "cuda": the CUDA runner; kUnsupported when no device is visible or when the runner cannot
///           run the model (cuda_unsupported_reason);
///   "auto": the CUDA runner when a device is visible and it can run the model, else the CPU
///           runner (fallback_reason says why, where a device was visible).
/// Throws kInvalidArgument for another device name or an unknown dtype.
DeviceChoice choose_device(const ModelConfig& c, const EngineOptions& options, bool cuda_present);

/// Checks tensor_parallel_size and gpus against the model's heads (tp_unsupported_reason) and
/// the `visible` GPUs; kInvalidArgument naming the flag and the problem.
void check_tensor_parallel(const ModelConfig& c, const EngineOptions& options, bool cuda,
                           int visible);

/// Builds the runner choose_device picks (a tensor-parallel group of them with
/// tensor_parallel_size > 1 or gpus set; check_tensor_parallel first), logging a one-line warning when "auto" falls back to
/// the CPU because the CUDA runner cannot run the model.
std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& options);

}  // namespace rill
