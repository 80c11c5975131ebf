#include "engine/tp/peer_group.h"

#include <cuda_runtime.h>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/error.h"

namespace rill::tp {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw Error(ErrorCode::kInternal,
                std::string("tensor parallel peer memory: ") + what + ": " + cudaGetErrorString(err));
}

// Restores the calling thread's current device when the scope ends.
class DeviceGuard {
 public:
  DeviceGuard() { check(cudaGetDevice(&device_), "cudaGetDevice"); }
  ~DeviceGuard() { cudaSetDevice(device_); }

 private:
  int device_ = 0;
};

constexpr size_t kFlagBytes = size_t(kernels::kMaxPeerRanks) * kernels::kMaxPeerCtas * 4;
constexpr size_t kEpochBytes = size_t(kernels::kMaxPeerCtas) * 4;

}  // namespace

std::shared_ptr<PeerGroup> PeerGroup::make(const std::vector<int>& gpus) {
  const int world = static_cast<int>(gpus.size());
  if (world < 2 || world > kernels::kMaxPeerRanks) return nullptr;
  for (int a : gpus)
    for (int b : gpus) {
      if (a == b) continue;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
      if (!can) {
        spdlog::info("tensor parallel: GPU {} cannot read GPU {}'s memory: NCCL for every "
                     "all-reduce", a, b);
        return nullptr;
      }
    }
  DeviceGuard guard;
  std::shared_ptr<PeerGroup> g(new PeerGroup());
  g->ctas_ = kernels::kMaxPeerCtas;  // one CTA per SM of the smallest GPU at most (PeerSum)
  for (int a : gpus) {
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a), "cudaDeviceGetAttribute");
    g->ctas_ = std::min(g->ctas_, std::max(1, sms));
  }
  check(cudaHostAlloc(reinterpret_cast<void**>(&g->abort_), sizeof(int),
                      cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc");
  *g->abort_ = 0;
  for (int a : gpus) {
    check(cudaSetDevice(a), "cudaSetDevice");
    for (int b : gpus) {
      if (a == b) continue;
      const cudaError_t err = cudaDeviceEnablePeerAccess(b, 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();  // clears it: enabled before (another group, NCCL) is what we want
      else
        check(err, "cudaDeviceEnablePeerAccess");
    }
    Rank r;
    r.device = a;
    check(cudaMalloc(&r.flags, kFlagBytes), "cudaMalloc");
    g->ranks_.push_back(r);  // owned from here: the destructor frees what is allocated
    check(cudaMalloc(&g->ranks_.back().epochs, kEpochBytes), "cudaMalloc");
    check(cudaMemset(g->ranks_.back().flags, 0, kFlagBytes), "cudaMemset");
    check(cudaMemset(g->ranks_.back().epochs, 0, kEpochBytes), "cudaMemset");
  }
  for (int a : gpus) {
    check(cudaSetDevice(a), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the zeroed flags are in place
  }
  return g;
}

PeerGroup::~PeerGroup() {
  int device = 0;
  cudaGetDevice(&device);
  for (const Rank& r : ranks_) {
    cudaSetDevice(r.device);
    cudaFree(r.flags);
    cudaFree(r.epochs);
  }
  cudaSetDevice(device);
  if (abort_) cudaFreeHost(abort_);
}

kernels::PeerSum PeerGroup::params(int rank, const std::vector<const void*>& buffers) const {
  if (rank < 0 || rank >= world() || static_cast<int>(buffers.size()) != world())
    throw Error(ErrorCode::kInternal, "PeerGroup::params: bad rank or buffer count");
  kernels::PeerSum p;
  p.world = world();
  p.rank = rank;
  p.ctas = ctas_;
  for (int r = 0; r < world(); ++r) {
    p.delta0[r] = buffers[static_cast<size_t>(r)];
    p.flags[r] = ranks_[static_cast<size_t>(r)].flags;
  }
  p.epochs = ranks_[static_cast<size_t>(rank)].epochs;
  p.abort = abort_;
  return p;
}

void PeerGroup::abort() {
  if (abort_) *static_cast<volatile int*>(abort_) = 1;
}

}  // namespace rill::tp
