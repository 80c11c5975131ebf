// Shared vocabulary of the kernel library's host API. kernels/ depends on nothing else in Rill:
// every op takes raw device pointers, a params struct and an explicit cudaStream_t; launchers
// never allocate, synchronize or copy between host and device, so a whole decode step can be
// captured in a CUDA graph. Each returns cudaErrorInvalidValue for an unsupported dtype or shape
// (see `last_kernel_error_detail()` for the reason) and the launch error otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rill::kernels {

/// Element type of activations, weights and (by default) the KV cache (fp32 accumulation
/// everywhere).
enum class DType : int { kF16 = 0, kBF16 = 1 };

/// Element type of the KV cache: the activation dtype, or fp8 e4m3 (1 byte, as vLLM's
/// --kv-cache-dtype fp8) with per-tensor scales: stored = e4m3(saturate(x / scale)), rounded to
/// nearest even from the activation-dtype value; read = float(stored) * scale.
enum class KvDType : int { kSame = 0, kFp8E4M3 = 1 };

/// Why the last launcher on this thread returned cudaErrorInvalidValue ("" if it did not).
const char* last_kernel_error_detail();

/// Programmatic dependent launch (Hopper and later, see src/launch.cuh): each kernel may start
/// while its predecessor drains and waits for its results inside the kernel, which hides the
/// launch gap between the ~300 kernels of a decode step. Process-wide, on by default; turned off
/// only to measure what it is worth. Takes effect for launches (and graph captures) made after
/// the call.
void set_programmatic_launch(bool enabled);
bool programmatic_launch();

/// The shared-memory carveout (percent of each SM's L1/shared array, as
/// cudaFuncAttributePreferredSharedMemoryCarveout) that every kernel launched by Rill's launchers
/// asks for; -1 leaves the choice to the driver, per kernel. An SM takes CTAs of a kernel with a
/// different carveout only after draining and reconfiguring, which undoes the overlap PDL gives
/// between a step's kernels when their shared-memory needs differ. Process-wide; takes effect for
/// launches (and graph captures) made after the call.
void set_smem_carveout(int percent);
int smem_carveout();
/// Applies smem_carveout() to `kernel` once per value (what the launchers call).
cudaError_t apply_smem_carveout(const void* kernel);
/// Lets `kernel` take `bytes` of dynamic shared memory on the current device (once per device,
/// kernel and size; thread-safe).
cudaError_t allow_dynamic_smem(const void* kernel, int bytes);

/// Geometry of the paged KV cache, shared by the rope/KV-write and attention kernels.
/// Storage: cache[layer][block][2 (k, v)][num_kv_heads][block_size][head_dim]; the launchers take
/// the base of one layer, i.e. `cache + layer * layer_stride()`.
struct KvCacheLayout {
  int num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 16;
  int head_dim = 0;
  /// Element type of K and V; every stride stays in elements (an fp8 element is one byte).
  KvDType cache_dtype = KvDType::kSame;
  /// Per-tensor scales of an fp8 cache (unused by kSame).
  float k_scale = 1.0f, v_scale = 1.0f;
  /// Bytes of one cache element (the activation dtypes are 16-bit).
  int64_t element_bytes() const { return cache_dtype == KvDType::kFp8E4M3 ? 1 : 2; }
  /// Elements from the K of a block to its V, and from one block to the next.
  int64_t kv_stride() const { return static_cast<int64_t>(num_kv_heads) * block_size * head_dim; }
  int64_t block_stride() const { return 2 * kv_stride(); }
  int64_t layer_stride() const { return static_cast<int64_t>(num_blocks) * block_stride(); }
};

/// Where each sequence's tokens live (see engine/kv/cache_policy.h, KvGeometry): stream positions
/// [0, n_sink) at slots [0, n_sink), later ones at ring_base + rel where rel = pos - n_sink,
/// taken modulo ring_size (ring_size = INT32_MAX for a linear cache). Slot s lives in block
/// block_table[s / block_size] at offset s % block_size. All values are per sequence.
struct SeqCacheGeometry {
  int32_t ring_base = 0;
  int32_t ring_size = 0x7fffffff;
  const int32_t* block_table = nullptr;  // device pointer to this sequence's row
};

}  // namespace rill::kernels
