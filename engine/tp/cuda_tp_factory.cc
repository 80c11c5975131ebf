// make_cuda_tp_runner (CUDA builds): a CudaRunner per GPU over its shard, NCCL between them.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/cuda/cuda_runner.h"
#include "engine/cuda/cuda_util.h"
#include "engine/error.h"
#include "engine/tp/nccl_collective.h"
#include "engine/tp/peer_group.h"
#include "engine/tp/tp_factory.h"
#include "engine/tp/tp_shard.h"
#include "engine/tp/tp_stage.h"

namespace rill::tp {

std::unique_ptr<TpRunner> make_cuda_tp_runner(const Model& model, const EngineOptions& options) {
  const int world = options.tensor_parallel_size;
  if (const auto why = tp_unsupported_reason(model.config, world))
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size: " + *why);
  const std::vector<int> gpus = choose_gpus(parse_gpus(options.gpus), world, cuda_device_count());
  auto host = std::make_shared<HostCollective>(world);
  std::string list;
  for (int g : gpus) {
    if (!list.empty()) list += ',';
    list += std::to_string(g);
  }
  spdlog::info("tensor parallel: {} ranks on GPUs {}, NCCL {}", world, list, nccl_version());
  // Every communicator is made here, on this thread, before any rank starts (ncclCommInitAll):
  // no rank allocates while another's collective is in flight, and no rank waits in an init
  // for one that failed before it. The group owns them (destroyed after the ranks, in rank
  // order) so that a failed rank's runner cannot end its communicator under the others.
  auto comms =
      std::make_shared<std::vector<std::shared_ptr<cuda::Collective>>>(make_nccl_group(gpus));
  if (tracing()) spdlog::info("tensor parallel: NCCL communicators ready");
  // Peer memory for the small steps' fused all-reduce, where every pair of GPUs has it.
  const std::shared_ptr<PeerGroup> peers = PeerGroup::make(gpus);
  spdlog::info("tensor parallel: all-reduce of steps up to {} tokens {}",
               options.cuda_tuning.peer_sum_max_tokens / std::max(1, world - 1),
               peers ? "over peer memory, fused into the residual add; NCCL beyond"
                     : "by NCCL too (no peer access)");
  auto abort_devices = [comms, peers] {
    if (peers) peers->abort();  // the fused all-reduces stop waiting first
    for (const auto& c : *comms) c->abort();
  };
  return std::make_unique<TpRunner>(
      world, model.config, host,
      [&, host, comms, peers](int rank) {
        set_stage("setting the device");
        RILL_CUDA(cudaSetDevice(gpus[static_cast<size_t>(rank)]));  // this worker thread's
        CudaTpRank tp;
        tp.comm = (*comms)[static_cast<size_t>(rank)];
        tp.host = host;
        tp.peers = peers;
        set_stage("sharding the weights");
        const Model shard = shard_model(model, world, rank);
        return std::make_unique<CudaRunner>(shard, options, std::move(tp));
      },
      abort_devices);
}

}  // namespace rill::tp
