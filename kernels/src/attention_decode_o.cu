// The fused output projection's host side (DecodeOProjection): its shape rule and the permuted
// copy of W_o it reads (attention_decode_o.cuh has the layout and the kernel's part).
#include <algorithm>
#include <cstdint>

#include "attention_decode_o.cuh"
#include "launch.cuh"
#include "rill/kernels/attention.h"

namespace rill::kernels {
namespace {

using decode_attn::kOHeadDim;

/// One thread per 16 output bytes: chunk c = ((((h * (N / 16) + nt) * 2 + kb) * 2 + half) * 32 +
/// lane) of the layout, copied from row 16 nt + lane / 4 + 8 half, columns h * 128 + 64 kb +
/// 16 (lane % 4) of w.
__global__ void permute_o_weight_kernel(const uint4* __restrict__ w, uint4* __restrict__ out,
                                        int N, int num_heads) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t chunks = static_cast<int64_t>(N) * num_heads * kOHeadDim / 16;
  const int64_t row_chunks = static_cast<int64_t>(num_heads) * kOHeadDim / 16;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(c % 32), half = static_cast<int>(c / 32 % 2),
              kb = static_cast<int>(c / 64 % 2);
    const int64_t nt = c / 128 % (N / 16), h = c / 128 / (N / 16);
    const int64_t row = 16 * nt + lane / 4 + 8 * half;
    const int64_t col_chunk = h * (kOHeadDim / 16) + 4 * kb + lane % 4;
    out[c] = w[row * row_chunks + col_chunk];
  }
}

}  // namespace

bool decode_o_supported(int num_seqs, int num_heads, int head_dim, int N, int num_splits) {
  return num_seqs == 1 && num_heads > 0 && head_dim == kOHeadDim && num_splits >= 2 &&
         num_splits <= decode_attn::kMaxClusterSplits && N == 512 * num_splits;
}

cudaError_t launch_permute_o_weight(const void* w, void* out, int N, int num_heads,
                                    cudaStream_t stream) {
  if (!w || !out || N <= 0 || N % 16 || num_heads <= 0 ||
      (reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(out)) % 16)
    return invalid_argument("permute_o_weight: null or misaligned operands, or N % 16 != 0");
  const int64_t chunks = static_cast<int64_t>(N) * num_heads * kOHeadDim / 16;
  const int blocks = static_cast<int>(std::min<int64_t>((chunks + 255) / 256, 4096));
  const cudaError_t err =
      launch_kernel(permute_o_weight_kernel, dim3(blocks), dim3(256), 0, stream,
                    static_cast<const uint4*>(w), static_cast<uint4*>(out), N, num_heads);
  return err != cudaSuccess ? err : launch_status();
}

}  // namespace rill::kernels
