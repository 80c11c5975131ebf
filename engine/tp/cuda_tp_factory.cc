// make_cuda_tp_runner (CUDA builds): a CudaRunner per GPU over its shard, NCCL between them.
#include <spdlog/spdlog.h>

#include "engine/cuda/cuda_runner.h"
#include "engine/cuda/cuda_util.h"
#include "engine/error.h"
#include "engine/tp/nccl_collective.h"
#include "engine/tp/tp_factory.h"
#include "engine/tp/tp_shard.h"

namespace rill::tp {

std::unique_ptr<TpRunner> make_cuda_tp_runner(const Model& model, const EngineOptions& options) {
  const int world = options.tensor_parallel_size;
  if (const auto why = tp_unsupported_reason(model.config, world))
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size: " + *why);
  const std::vector<int> gpus = choose_gpus(parse_gpus(options.gpus), world, cuda_device_count());
  const NcclId id = make_nccl_id();
  auto host = std::make_shared<HostCollective>(world);
  std::string list;
  for (int g : gpus) {
    if (!list.empty()) list += ',';
    list += std::to_string(g);
  }
  spdlog::info("tensor parallel: {} ranks on GPUs {}, NCCL {}", world, list, nccl_version());
  return std::make_unique<TpRunner>(world, model.config, host, [&, host](int rank) {
    RILL_CUDA(cudaSetDevice(gpus[static_cast<size_t>(rank)]));  // this worker thread's device
    CudaTpRank tp;
    tp.comm = make_nccl_collective(id, world, rank);
    tp.host = host;
    return std::make_unique<CudaRunner>(shard_model(model, world, rank), options, std::move(tp));
  });
}

}  // namespace rill::tp
