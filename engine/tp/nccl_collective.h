// NCCL communicators for a tensor-parallel group of threads in one process (one GPU each).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/collective.h"

namespace rill::tp {

/// The group's NCCL unique id (ncclGetUniqueId): made once, handed to every rank. Across hosts it
/// would travel out of band (docs/tensor_parallel.md).
struct NcclId {
  char bytes[128] = {};
};
NcclId make_nccl_id();

/// Rank `rank` of `world` on the calling thread's current device (ncclCommInitRank: blocks until
/// every rank has joined, so the ranks call it at once, from their own threads). Sets
/// NCCL_NVLS_ENABLE=0 first when the environment leaves it unset. kInternal naming NCCL's error.
std::unique_ptr<cuda::Collective> make_nccl_collective(const NcclId& id, int world, int rank);

/// One communicator per device of `gpus` (rank r on gpus[r]), made at once on the calling thread
/// (ncclCommInitAll: no rank can wait for another that has not started). The connections between
/// the ranks are made here, not at the first collective (NCCL_RUNTIME_CONNECT=0 unless the
/// environment sets it): the first collective then allocates nothing, so no rank's allocation
/// can stall behind another rank's collective in flight (docs/tensor_parallel.md). kInternal
/// naming NCCL's error.
std::vector<std::shared_ptr<cuda::Collective>> make_nccl_group(const std::vector<int>& gpus);

/// The NCCL version as "2.27.3".
std::string nccl_version();

}  // namespace rill::tp
