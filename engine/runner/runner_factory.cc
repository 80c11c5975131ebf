#include "engine/runner/runner_factory.h"

#include "engine/cpu/cpu_runner.h"
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

std::unique_ptr<ModelRunner> make_runner(const Model& model, const EngineOptions& o) {
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw Error(ErrorCode::kInvalidArgument, "unknown device '" + o.device + "' (auto, cpu, cuda)");
  const bool use_cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  if (use_cuda) {
#ifdef RILL_HAVE_CUDA
    if (!cuda_available()) throw Error(ErrorCode::kUnsupported, "no CUDA device is visible");
    return std::make_unique<CudaRunner>(model, o);
#else
    throw Error(ErrorCode::kUnsupported, "this build of Rill has no CUDA support (rebuild with nvcc present)");
#endif
  }
  CpuRunnerOptions c;
  c.num_threads = o.cpu_threads;
  c.block_size = o.block_size;
  c.kv_cache_bytes = o.cpu_kv_cache_bytes;
  c.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  return std::make_unique<CpuRunner>(model, c);
}

}  // namespace rill
