#include "engine/tp/host_collective.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace rill::tp {

HostCollective::HostCollective(int world) : world_(world), posted_(static_cast<size_t>(world)) {
  if (world < 1) throw Error(ErrorCode::kInternal, "host collective of " + std::to_string(world));
}

void HostCollective::abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void HostCollective::barrier() {
  std::unique_lock lock(mu_);
  if (aborted_) throw Error(ErrorCode::kInternal, "tensor parallel: another rank failed");
  const uint64_t gen = generation_;
  if (++arrived_ == world_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) throw Error(ErrorCode::kInternal, "tensor parallel: another rank failed");
}

void HostCollective::arrive(int rank, const void* ptr) {
  {
    std::lock_guard lock(mu_);
    posted_[static_cast<size_t>(rank)] = ptr;
  }
  barrier();
}

void HostCollective::all_reduce_sum(int rank, float* data, size_t n) {
  arrive(rank, data);
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < world_; ++r) {  // rank order: the same bits on every rank
    const float* src = static_cast<const float*>(posted_[static_cast<size_t>(r)]);
    for (size_t i = 0; i < n; ++i) sum[i] += src[i];
  }
  barrier();  // everyone has read every buffer before any is overwritten
  std::memcpy(data, sum.data(), n * sizeof(float));
}

void HostCollective::all_gather(int rank, const float* send, size_t n, float* recv) {
  arrive(rank, send);
  for (int r = 0; r < world_; ++r)
    std::memcpy(recv + size_t(r) * n, posted_[static_cast<size_t>(r)], n * sizeof(float));
  barrier();
}

std::vector<const void*> HostCollective::exchange(int rank, const void* ptr) {
  arrive(rank, ptr);
  std::vector<const void*> all = posted_;
  barrier();
  return all;
}

int64_t HostCollective::min(int rank, int64_t value) {
  arrive(rank, &value);
  int64_t m = value;
  for (int r = 0; r < world_; ++r)
    m = std::min(m, *static_cast<const int64_t*>(posted_[static_cast<size_t>(r)]));
  barrier();
  return m;
}

}  // namespace rill::tp
