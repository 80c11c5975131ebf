#include "engine/runner_factory.h"

#include <spdlog/spdlog.h>

#include "engine/cpu/cpu_runner.h"
#include "engine/cuda/cuda_support.h"
#include "engine/error.h"
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

std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& o) {
  const DeviceChoice choice = choose_device(model.config, o, cuda_available());
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
  return std::make_unique<CpuRunner>(model, c);
}

}  // namespace rill
