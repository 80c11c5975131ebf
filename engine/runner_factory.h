// Chooses and builds a runner for a model: the CUDA runner when a GPU is present (and Rill was
// built with CUDA) and its kernels take the model's shapes, otherwise the CPU reference runner.
// It sits above engine/cpu/ and engine/cuda/, which it composes; programs (the server, tools)
// call it, the runners never do.
#pragma once

#include <memory>
#include <string>

#include "engine/model/model.h"
#include "engine/runner/engine_options.h"
#include "engine/runner/runner.h"

namespace rill {

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
/// tensor_parallel_size > 1 or gpus set; check_tensor_parallel first), logging a one-line warning
/// when "auto" falls back to the CPU because the CUDA runner cannot run the model.
std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& options);

}  // namespace rill
