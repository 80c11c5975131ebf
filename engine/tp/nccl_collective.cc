#include "engine/tp/nccl_collective.h"

#include <nccl.h>

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <shared_mutex>

#include "engine/error.h"

namespace rill::tp {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(ErrorCode::kInternal, std::string("NCCL ") + what + ": " + ncclGetErrorString(r) +
                                          (r == ncclSystemError || r == ncclInternalError
                                               ? std::string(" (") + ncclGetLastError(nullptr) + ")"
                                               : std::string()));
}

// NVLink multicast (NVLS) stays off: the machines Rill is measured on require it, and its
// buffers take GPU memory the KV pool would otherwise get. An explicit setting is respected.
void keep_nvls_off() {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

// Connections at init (ncclCommInitAll), not lazily at the first collective: the lazy path
// allocates and exchanges buffers inside the first ncclAllReduce, after the KV pool took the
// memory and while another rank may already have a kernel waiting on the device.
void connect_at_init() {
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
}

ncclDataType_t nccl_type(cuda::CollectiveType t) {
  switch (t) {
    case cuda::CollectiveType::kF32:
      return ncclFloat32;
    case cuda::CollectiveType::kF16:
      return ncclFloat16;
    case cuda::CollectiveType::kBF16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

class NcclCollective final : public cuda::Collective {
 public:
  NcclCollective(const NcclId& id, int world, int rank) : rank_(rank), world_(world) {
    static_assert(sizeof(NcclId::bytes) == sizeof(ncclUniqueId));
    ncclUniqueId uid;
    std::memcpy(&uid, id.bytes, sizeof(uid));
    check(ncclCommInitRank(&comm_, world, uid, rank), "ncclCommInitRank");
  }
  // One of a group made by ncclCommInitAll.
  NcclCollective(ncclComm_t comm, int world, int rank) : rank_(rank), world_(world), comm_(comm) {}
  ~NcclCollective() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(void* buf, size_t count, cuda::CollectiveType type,
                      cudaStream_t stream) override {
    std::shared_lock lock(mu_);
    check(ncclAllReduce(buf, buf, count, nccl_type(type), ncclSum, live(), stream),
          "ncclAllReduce");
  }
  void all_gather_f32(float* buf, size_t count, cudaStream_t stream) override {
    std::shared_lock lock(mu_);
    check(ncclAllGather(buf + size_t(rank_) * count, buf, count, ncclFloat32, live(), stream),
          "ncclAllGather");
  }
  void abort() override {
    aborted_ = true;
    // An enqueue in progress finishes first (it does not wait for other ranks: the connections
    // exist). Should it be stuck anyway, abort without the lock: a late enqueue on the freed
    // communicator is the lesser harm than a group that never fails.
    std::unique_lock lock(mu_, std::defer_lock);
    if (!lock.try_lock_for(std::chrono::seconds(10)))
      spdlog::error("NCCL rank {}: aborting while an operation is being enqueued", rank_);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  ncclComm_t live() const {
    if (aborted_ || !comm_)
      throw Error(ErrorCode::kInternal, "NCCL rank " + std::to_string(rank_) +
                                            ": the communicator was aborted (another rank failed)");
    return comm_;
  }

  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_ = false;
  std::shared_timed_mutex mu_;
};

}  // namespace

NcclId make_nccl_id() {
  keep_nvls_off();
  ncclUniqueId uid;
  check(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclId id;
  std::memcpy(id.bytes, &uid, sizeof(uid));
  return id;
}

std::unique_ptr<cuda::Collective> make_nccl_collective(const NcclId& id, int world, int rank) {
  keep_nvls_off();
  connect_at_init();
  return std::make_unique<NcclCollective>(id, world, rank);
}

std::vector<std::shared_ptr<cuda::Collective>> make_nccl_group(const std::vector<int>& gpus) {
  keep_nvls_off();
  connect_at_init();
  const int world = static_cast<int>(gpus.size());
  std::vector<ncclComm_t> comms(gpus.size(), nullptr);
  check(ncclCommInitAll(comms.data(), world, gpus.data()), "ncclCommInitAll");
  std::vector<std::shared_ptr<cuda::Collective>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(std::make_shared<NcclCollective>(comms[static_cast<size_t>(r)], world, r));
  return out;
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace rill::tp
