// Builds tensor-parallel runner groups: the CPU emulation (CpuRunner ranks meeting in a host
// collective) and, in CUDA builds, the CUDA group (CudaRunner ranks meeting in NCCL).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/model.h"
#include "engine/runner/engine_options.h"
#include "engine/tp/tp_runner.h"

namespace rill::tp {

/// `world` CpuRunner ranks, each over its tp::shard_model of `model`, as one runner. Throws
/// kInvalidArgument (tp_unsupported_reason) when the model cannot be split so.
std::unique_ptr<TpRunner> make_cpu_tp_runner(const Model& model, int world,
                                             const CpuRunnerOptions& options);

/// "0,2" -> {0, 2}; "" -> {}. kInvalidArgument naming --gpus for anything but non-negative
/// integers separated by commas (at most kMaxWorld).
std::vector<int> parse_gpus(const std::string& list);

/// The GPUs a group of `world` ranks runs on: `gpus` (ids of visible devices, each once) or, when
/// empty, devices 0 .. world - 1. kInvalidArgument naming the flag when the list's length is not
/// `world`, an id repeats or is not below `visible`.
std::vector<int> choose_gpus(const std::vector<int>& gpus, int world, int visible);

/// The CUDA group: rank r's CudaRunner on GPU gpus[r] (choose_gpus) over its shard, NCCL
/// all-reduces and all-gathers between them, a size-1 group included. kUnsupported in builds
/// without CUDA.
std::unique_ptr<TpRunner> make_cuda_tp_runner(const Model& model, const EngineOptions& options);

}  // namespace rill::tp
