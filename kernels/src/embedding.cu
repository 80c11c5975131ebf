// Embedding gather: out[t, :] = float(table[id, :]) for id = tokens[t] (or, negative, the token
// previous[-1 - tokens[t]] a previous step sampled), a zero row for ids outside [0, vocab).
#include <algorithm>

#include "launch.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kThreads = 256;

// grid (num_tokens, column blocks); VEC: 16-byte loads of 8 elements (hidden % 8 == 0, aligned).
template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const T* __restrict__ table,           // [vocab, hidden]
                     const int32_t* __restrict__ tokens,    // [num_tokens]
                     const int32_t* __restrict__ previous,  // [num_previous] or null
                     int num_previous,
                     float* __restrict__ out,  // [num_tokens, hidden]
                     int hidden, int vocab, int vocab_begin) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  const int t = blockIdx.x;
  int id = tokens[t];
  if (id < 0 && previous) id = -1 - id < num_previous ? previous[-1 - id] : -1;
  const bool valid = id >= vocab_begin && id - vocab_begin < vocab;  // -1 never valid: begin >= 0
  id -= vocab_begin;
  const T* src = table + static_cast<int64_t>(valid ? id : 0) * hidden;
  float* dst = out + static_cast<int64_t>(t) * hidden;
  constexpr int kStep = VEC ? kVec : 1;
  for (int i = (blockIdx.y * kThreads + threadIdx.x) * kStep; i < hidden;
       i += gridDim.y * kThreads * kStep) {
    if constexpr (VEC) {
      float f[kVec] = {};
      if (valid) load8(src + i, f);
      store8(dst + i, f);
    } else {
      dst[i] = valid ? to_float<T>(src[i]) : 0.0f;
    }
  }
}

}  // namespace

cudaError_t launch_embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden < 0 || p.vocab < 0 || p.vocab_begin < 0)
    return invalid_argument("embedding: negative size");
  if (p.num_tokens == 0 || p.hidden == 0) return cudaSuccess;
  if (!p.table || !p.tokens || !p.out) return invalid_argument("embedding: null pointer");
  if (p.num_previous < 0 || (p.num_previous > 0 && !p.previous))
    return invalid_argument("embedding: num_previous without previous");
  const bool vec = p.hidden % kVec == 0 && is_aligned16(p.table) && is_aligned16(p.out);
  // Enough column blocks that one row of a long hidden is still spread over a few SMs at decode.
  const int per_block = kThreads * (vec ? kVec : 1);
  const int col_blocks = std::min((p.hidden + per_block - 1) / per_block, 8);
  const dim3 grid(p.num_tokens, col_blocks);
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    const T* table = static_cast<const T*>(p.table);
    if (vec) {
      launch_kernel(embedding_kernel<T, true>, dim3(grid), dim3(kThreads), 0, stream, table,
                    p.tokens, p.previous, p.num_previous, p.out, p.hidden, p.vocab, p.vocab_begin);
    } else {
      launch_kernel(embedding_kernel<T, false>, dim3(grid), dim3(kThreads), 0, stream, table,
                    p.tokens, p.previous, p.num_previous, p.out, p.hidden, p.vocab, p.vocab_begin);
    }
    return launch_status();
  });
}

}  // namespace rill::kernels
