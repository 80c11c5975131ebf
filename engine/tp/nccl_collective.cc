#include "engine/tp/nccl_collective.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>

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
  ~NcclCollective() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce_sum(void* buf, size_t count, cuda::CollectiveType type,
                      cudaStream_t stream) override {
    check(ncclAllReduce(buf, buf, count, nccl_type(type), ncclSum, comm_, stream), "ncclAllReduce");
  }
  void all_gather_f32(float* buf, size_t count, cudaStream_t stream) override {
    check(ncclAllGather(buf + size_t(rank_) * count, buf, count, ncclFloat32, comm_, stream),
          "ncclAllGather");
  }

 private:
  int rank_, world_;
  ncclComm_t comm_ = nullptr;
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
  return std::make_unique<NcclCollective>(id, world, rank);
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace rill::tp
