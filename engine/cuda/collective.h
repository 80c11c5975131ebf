// Device collectives among the ranks of a tensor-parallel group, as the CUDA runner calls them:
// enqueued on a stream, capturable into a CUDA graph. NCCL implements them (engine/tp/
// nccl_collective.h); the runner sees only this interface.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace rill::cuda {

enum class CollectiveType { kF32, kF16, kBF16 };

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  /// In place: buf [count] = its sum over the ranks.
  virtual void all_reduce_sum(void* buf, size_t count, CollectiveType type,
                              cudaStream_t stream) = 0;
  /// In place: buf [world][count], this rank's part at buf + rank * count, gathered from all.
  virtual void all_gather_f32(float* buf, size_t count, cudaStream_t stream) = 0;
  /// Ends the communicator from any thread: operations in flight on the device stop, later
  /// calls throw. What a group does when one rank fails, so that the others never wait for it.
  virtual void abort() = 0;
};

}  // namespace rill::cuda
