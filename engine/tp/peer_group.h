// The peer-memory side of a tensor-parallel group on one host: the fused one-shot all-reduce
// (kernels::PeerSum) that small steps use instead of NCCL. Each rank's GPU reads the others'
// partial sums directly over NVLink, inside the residual add that follows them, so a batch-1
// layer pays one short kernel per all-reduce instead of an NCCL kernel and a separate add
// (docs/tensor_parallel.md, "Small messages").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rill/kernels/elementwise.h"

namespace rill::tp {

class PeerGroup {
 public:
  /// The group of `gpus` (rank r on gpus[r]), or null when it cannot have one: fewer than 2 or
  /// more than kernels::kMaxPeerRanks GPUs, or a pair without peer access. Enables peer access
  /// between every pair and allocates each rank's barrier flags and counters on its GPU (zero).
  /// Leaves the calling thread's current device as it was. Throws kInternal on a CUDA error.
  static std::shared_ptr<PeerGroup> make(const std::vector<int>& gpus);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int world() const { return static_cast<int>(ranks_.size()); }
  /// Rank `rank`'s PeerSum over one delta buffer of every rank (buffers[r]: rank r's, readable
  /// from rank `rank`'s GPU). A rank passes two such buffers in alternation (PeerSum's rule).
  kernels::PeerSum params(int rank, const std::vector<const void*>& buffers) const;
  /// Ends every wait of the group's kernels, in progress and to come (any thread): what the
  /// group does when a rank fails, as ncclCommAbort does for NCCL's kernels.
  void abort();

 private:
  struct Rank {
    int device = 0;
    uint32_t* flags = nullptr;   // [kMaxPeerRanks][kMaxPeerCtas] on `device`
    uint32_t* epochs = nullptr;  // [kMaxPeerCtas] on `device`
  };
  PeerGroup() = default;

  std::vector<Rank> ranks_;
  int ctas_ = 1;          // kernels::PeerSum::ctas
  int* abort_ = nullptr;  // mapped pinned host memory, read by every GPU
};

}  // namespace rill::tp
