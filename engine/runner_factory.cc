#include "engine/runner_factory.h"

#include <spdlog/spdlog.h>

#include "engine/cpu/cpu_runner.h"
#include "engine/cuda/cuda_support.h"
#include "engine/error.h"
#include "engine/tp/tp_factory.h"
#include "engine/tp/tp_shard.h"
#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#endif

namespace rill {

bool cuda_available() {
#ifdef RILL_HAVE_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

DeviceChoice choose_device(const ModelConfig& c, const EngineOptions& o, bool cuda_present) {
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw Error(ErrorCode::kInvalidArgument, "unknown device '" + o.device + "' (auto, cpu, cuda)");
  if (o.device == "cpu" || (o.device == "auto" && !cuda_present)) return {};
  if (!cuda_present) {
#ifdef RILL_HAVE_CUDA
    throw Error(ErrorCode::kUnsupported, "no CUDA device is visible");
#else
    throw Error(ErrorCode::kUnsupported,
                "this build of Rill has no CUDA support (rebuild with nvcc present)");
#endif
  }
  const auto why = cuda_unsupported_reason(c, cuda_compute_dtype(o.dtype, c.stored_dtype),
                                           parse_kv_cache_dtype(o.kv_cache_dtype),
                                           resolve_quantization(o.quantization, c.quant));
  if (!why) return {.cuda = true};
  if (o.device == "cuda")
    throw Error(ErrorCode::kUnsupported, "the CUDA runner cannot run this model: " + *why);
  return {.cuda = false, .fallback_reason = *why};
}

void check_tensor_parallel(const ModelConfig& c, const EngineOptions& o, bool cuda,
                           int visible) {
  if (const auto why = tp::tp_unsupported_reason(c, o.tensor_parallel_size))
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size: " + *why);
  if (!cuda) {
    if (!o.gpus.empty())
      throw Error(ErrorCode::kInvalidArgument, "--gpus: the CPU runner uses no GPU");
    return;
  }
  tp::choose_gpus(tp::parse_gpus(o.gpus), o.tensor_parallel_size, visible);
}

std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& o) {
  const bool grouped = o.tensor_parallel_size != 1 || !o.gpus.empty();
  if (grouped && o.device == "auto" && !cuda_available())
    throw Error(ErrorCode::kInvalidArgument,
                "--tensor-parallel-size " + std::to_string(o.tensor_parallel_size) +
                    " needs GPUs and none is visible (--device cpu emulates the ranks on the CPU)");
  const DeviceChoice choice = choose_device(model.config, o, cuda_available());
  if (grouped) {
#ifdef RILL_HAVE_CUDA
    const int visible = choice.cuda ? cuda_device_count() : 0;
#else
    const int visible = 0;
#endif
    check_tensor_parallel(model.config, o, choice.cuda, visible);
    if (choice.cuda) return tp::make_cuda_tp_runner(model, o);
  }
  if (choice.cuda) {
#ifdef RILL_HAVE_CUDA
    return std::make_unique<CudaRunner>(model, o);
#endif
  }
  if (!choice.fallback_reason.empty())
    spdlog::warn("--device auto: running {} on the CPU: the CUDA runner cannot run it: {}",
                 model.config.architecture, choice.fallback_reason);
  CpuRunnerOptions c;
  c.num_threads = o.cpu_threads;
  c.block_size = o.block_size;
  c.kv_cache_bytes = o.cpu_kv_cache_bytes;
  c.host_kv_cache_bytes = o.host_kv_cache_bytes;
  c.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  c.quantization = resolve_quantization(o.quantization, model.config.quant);
  if (grouped) return tp::make_cpu_tp_runner(model, o.tensor_parallel_size, c);
  return std::make_unique<CpuRunner>(model, c);
}

}  // namespace rill
