// The CUDA runner's support for sequences that outlive a request (sessions): a new turn's
// sampler restart, and moving an idle sequence's cache blocks to pinned host memory and back.
// An offload copies on the runner's stream, so it follows the steps that wrote the blocks and
// precedes any later step that reuses them. A restore copies on copy_stream_, after the steps
// launched before it (they may still use the freed blocks it takes) but beside later ones, so a
// step that does not carry the sequence never waits for it; one that does waits on the device.
#include <algorithm>
#include <string>

#include "engine/cuda/cuda_runner.h"
#include "engine/runner/step_validation.h"

namespace rill {

void CudaRunner::allocate_host_kv(int64_t bytes) {
  const size_t block_bytes =
      size_t(layout_.block_stride()) * layout_.element_bytes() * config_.num_layers;
  const int64_t blocks = bytes / static_cast<int64_t>(block_bytes);
  host_kv_alloc_ =
      std::make_unique<BlockAllocator>(static_cast<int>(std::min<int64_t>(blocks, INT32_MAX)));
  if (blocks > 0)
    host_kv_ =
        cuda::PinnedMemory(size_t(blocks) * block_bytes, "host KV cache (offloaded sessions)");
}

void CudaRunner::restart_sampling(SeqId id, const SamplingParams& sampling) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  validate_sequence({id, kv_->sequence(id).policy, sampling}, config_.vocab_size);
  cuda::SamplingSlot& slot = it->second.sampling;
  if (sampling.has_penalties()) {
    if (slot.state_slot < 0) {
      if (free_state_slots_.empty())
        throw Error(ErrorCode::kResourceExhausted, "too many sequences with penalties");
      slot.state_slot = free_state_slots_.back();
      free_state_slots_.pop_back();
    }
    const size_t V = config_.vocab_size;
    RILL_CUDA(
        cudaMemsetAsync(output_counts_.as<int32_t>() + slot.state_slot * V, 0, V * 4, stream_));
    RILL_CUDA(cudaMemsetAsync(prompt_mask_.as<uint8_t>() + slot.state_slot * V, 0, V, stream_));
  } else if (slot.state_slot >= 0) {
    free_state_slots_.push_back(
        slot.state_slot);  // steps in flight finish with it first (stream order)
    slot.state_slot = -1;
  }
  slot.params = sampling;
  slot.step = slot.first_step = 0;  // the draws this runner makes start at 0 (launch() counts them)
}

int CudaRunner::host_kv_blocks() const {
  return host_kv_alloc_ ? host_kv_alloc_->num_blocks() : 0;
}
int CudaRunner::host_kv_blocks_free() const {
  return host_kv_alloc_ ? host_kv_alloc_->num_free() : 0;
}

// One block of every layer is a 2-D copy: `layers` rows of block_bytes, a layer stride apart in
// the pool, packed in host memory ([host block][layer][block_bytes]).
void CudaRunner::copy_block(int32_t pool_block, int32_t host_block, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  const size_t block_bytes = size_t(layout_.block_stride()) * layout_.element_bytes();
  const size_t layer_bytes = size_t(layout_.layer_stride()) * layout_.element_bytes();
  char* pool = cache_.as<char>() + size_t(pool_block) * block_bytes;
  char* host = host_kv_.as<char>() + size_t(host_block) * block_bytes * config_.num_layers;
  if (kind == cudaMemcpyDeviceToHost)
    RILL_CUDA(cudaMemcpy2DAsync(host, block_bytes, pool, layer_bytes, block_bytes,
                                config_.num_layers, kind, stream));
  else
    RILL_CUDA(cudaMemcpy2DAsync(pool, layer_bytes, host, block_bytes, block_bytes,
                                config_.num_layers, kind, stream));
}

void CudaRunner::copy_pool_block(int32_t src, int32_t dst) {
  const size_t block_bytes = size_t(layout_.block_stride()) * layout_.element_bytes();
  const size_t layer_bytes = size_t(layout_.layer_stride()) * layout_.element_bytes();
  char* pool = cache_.as<char>();
  RILL_CUDA(cudaMemcpy2DAsync(pool + size_t(dst) * block_bytes, layer_bytes,
                              pool + size_t(src) * block_bytes, layer_bytes, block_bytes,
                              config_.num_layers, cudaMemcpyDeviceToDevice, stream_));
}

void CudaRunner::offload_sequence(SeqId id) {
  if (!seqs_.count(id)) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  wait_for_restore(id);
  const int n = kv_->blocks_held(id);
  if (n > host_kv_blocks_free())
    throw Error(ErrorCode::kResourceExhausted, "host KV memory full: offloading sequence " +
                                                   std::to_string(id) + " needs " +
                                                   std::to_string(n) + " blocks, " +
                                                   std::to_string(host_kv_blocks_free()) + " free");
  release_offloaded();
  std::vector<int32_t> host(static_cast<size_t>(n));
  for (int32_t& b : host) b = host_kv_alloc_->allocate();
  const std::vector<int32_t>& pool = kv_->sequence(id).block_table;
  if (!tuning_.async_offload) {
    PendingTransfer t = begin_transfer(false, n, stream_);
    for (int b = 0; b < n; ++b) copy_block(pool[b], host[b], cudaMemcpyDeviceToHost, stream_);
    end_transfer(std::move(t), stream_);
    kv_->release_blocks(id);  // later steps reuse them after the copies (stream order)
    offloaded_[id] = std::move(host);
    return;
  }
  // Beside the steps: after those launched so far (they wrote these blocks). The sequence keeps
  // its blocks until the copy ends, so no later step can write them before it has read them.
  cudaEvent_t launched = nullptr;
  RILL_CUDA(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
  RILL_CUDA(cudaEventRecord(launched, stream_));
  RILL_CUDA(cudaStreamWaitEvent(copy_stream_, launched));
  cudaEventDestroy(launched);  // released once it completes
  PendingTransfer t = begin_transfer(false, n, copy_stream_);
  for (int b = 0; b < n; ++b) copy_block(pool[b], host[b], cudaMemcpyDeviceToHost, copy_stream_);
  end_transfer(std::move(t), copy_stream_);
  Offloading o{id, n, nullptr};
  RILL_CUDA(cudaEventCreateWithFlags(&o.done, cudaEventDisableTiming));
  RILL_CUDA(cudaEventRecord(o.done, copy_stream_));
  offloading_.push_back(o);
  offloading_blocks_ += n;
  offloaded_[id] = std::move(host);
}

void CudaRunner::release_offloaded() {
  while (!offloading_.empty() && cudaEventQuery(offloading_.front().done) == cudaSuccess) {
    const Offloading& o = offloading_.front();
    kv_->release_blocks(o.id);  // read by the copy: free for later steps
    cudaEventDestroy(o.done);
    offloading_blocks_ -= o.blocks;
    offloading_.pop_front();
  }
}

// A restore of an offload whose copy has not been released: the pool blocks never left, so the
// sequence keeps them; the host copy is dropped once the copy that writes it is done (a host
// wait of at most that copy: a turn that follows its offload this closely is rare).
bool CudaRunner::keep_offloading(SeqId id) {
  const auto it = std::find_if(offloading_.begin(), offloading_.end(),
                               [&](const Offloading& o) { return o.id == id; });
  if (it == offloading_.end()) return false;
  RILL_CUDA(cudaEventSynchronize(it->done));
  cudaEventDestroy(it->done);
  offloading_blocks_ -= it->blocks;
  offloading_.erase(it);
  forget_offloaded(id);  // its host blocks
  return true;
}

// A removal of an offload still copying: its blocks go back to the pool now, so the steps
// launched from here wait for the copy to have read them.
void CudaRunner::drop_offloading(SeqId id) {
  const auto it = std::find_if(offloading_.begin(), offloading_.end(),
                               [&](const Offloading& o) { return o.id == id; });
  if (it == offloading_.end()) return;
  RILL_CUDA(cudaStreamWaitEvent(stream_, it->done));
  cudaEventDestroy(it->done);  // released once it completes
  offloading_blocks_ -= it->blocks;
  offloading_.erase(it);
}

void CudaRunner::restore_sequence(SeqId id) {
  if (keep_offloading(id)) return;
  auto it = offloaded_.find(id);
  if (it == offloaded_.end())
    throw Error(ErrorCode::kNotFound, "sequence " + std::to_string(id) + " is not offloaded");
  std::vector<bool> from_cache;  // blocks the prefix cache still held: nothing to copy
  const std::vector<int32_t>& pool = kv_->reacquire_blocks(id, &from_cache);
  // The steps launched so far may still read or write the blocks just taken (freed by sequences
  // removed while they were in flight): the copy starts after them.
  cudaEvent_t launched = nullptr;
  RILL_CUDA(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming));
  RILL_CUDA(cudaEventRecord(launched, stream_));
  RILL_CUDA(cudaStreamWaitEvent(copy_stream_, launched));
  cudaEventDestroy(launched);  // released once it completes
  PendingTransfer t = begin_transfer(true, static_cast<int>(pool.size()), copy_stream_);
  for (size_t b = 0; b < pool.size(); ++b)
    if (!from_cache[b]) copy_block(pool[b], it->second[b], cudaMemcpyHostToDevice, copy_stream_);
  Restoring r;
  r.host = std::move(it->second);
  RILL_CUDA(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming));
  end_transfer(std::move(t), copy_stream_);
  RILL_CUDA(cudaEventRecord(r.done, copy_stream_));
  offloaded_.erase(it);
  restoring_.emplace(id, std::move(r));
}

bool CudaRunner::restore_done(SeqId id) {
  auto it = restoring_.find(id);
  if (it == restoring_.end()) return true;
  if (cudaEventQuery(it->second.done) != cudaSuccess) return false;
  for (int32_t b : it->second.host) host_kv_alloc_->free(b);
  cudaEventDestroy(it->second.done);
  restoring_.erase(it);
  return true;
}

void CudaRunner::wait_for_restore(SeqId id) {
  auto it = restoring_.find(id);
  if (it == restoring_.end()) return;
  RILL_CUDA(cudaStreamWaitEvent(stream_, it->second.done));
  // Work queued on stream_ from here (an offload into these host blocks) follows the copy.
  for (int32_t b : it->second.host) host_kv_alloc_->free(b);
  cudaEventDestroy(it->second.done);
  restoring_.erase(it);
}

CudaRunner::PendingTransfer CudaRunner::begin_transfer(bool restore, int blocks,
                                                       cudaStream_t stream) {
  PendingTransfer t;
  t.info.restore = restore;
  t.info.blocks = blocks;
  RILL_CUDA(cudaEventCreate(&t.begin));
  RILL_CUDA(cudaEventCreate(&t.end));
  RILL_CUDA(cudaEventRecord(t.begin, stream));
  return t;
}

void CudaRunner::end_transfer(PendingTransfer t, cudaStream_t stream) {
  RILL_CUDA(cudaEventRecord(t.end, stream));
  transfers_.push_back(t);
}

std::vector<KvTransfer> CudaRunner::completed_transfers() {
  release_offloaded();
  std::vector<KvTransfer> done;
  while (!transfers_.empty() && cudaEventQuery(transfers_.front().end) == cudaSuccess) {
    PendingTransfer& t = transfers_.front();
    float ms = 0;
    RILL_CUDA(cudaEventElapsedTime(&ms, t.begin, t.end));
    t.info.seconds = ms * 1e-3;
    done.push_back(t.info);
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
    transfers_.pop_front();
  }
  return done;
}

void CudaRunner::forget_offloaded(SeqId id) {
  auto it = offloaded_.find(id);
  if (it == offloaded_.end()) return;
  for (int32_t b : it->second) host_kv_alloc_->free(b);
  offloaded_.erase(it);
}

}  // namespace rill
