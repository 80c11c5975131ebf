// Collectives among the threads of one process, one thread per rank: the CPU runner's emulation
// of tensor parallelism (its all-reduce and all-gather), and the agreements the ranks of a GPU
// group make on the host (the KV pool's block count). Every rank calls the same collectives in
// the same order; sums run in rank order, so every rank gets the same bits.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace rill::tp {

class HostCollective {
 public:
  explicit HostCollective(int world);
  int world() const { return world_; }

  /// data[i] = sum over ranks of their data[i] (n floats, the same n on every rank).
  void all_reduce_sum(int rank, float* data, size_t n);
  /// recv [world][n] = every rank's send [n], in rank order.
  void all_gather(int rank, const float* send, size_t n, float* recv);
  /// Every rank's `ptr`, in rank order (buffers one rank shares with the others).
  std::vector<const void*> exchange(int rank, const void* ptr);
  /// The smallest of the ranks' values.
  int64_t min(int rank, int64_t value);
  /// Returns once every rank has called it.
  void barrier();
  /// Fails every wait in progress and to come (kInternal "another rank failed"): a rank that
  /// throws calls it so that the others do not wait for it forever.
  void abort();

 private:
  // Publishes this rank's pointer, then waits until every rank has (a generation barrier).
  void arrive(int rank, const void* ptr);

  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void*> posted_;
};

}  // namespace rill::tp
