// fp32 building blocks of the CPU reference forward pass. Straightforward loops with the exact
// formulas of transformers; the CUDA kernels are tested against these.
#pragma once

#include <cstdint>
#include <span>

#include "engine/util/thread_pool.h"

namespace rill::cpu {

/// y[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]).  x [T, K], w [N, K], y [T, N].
void matmul(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t T,
            int64_t K, int64_t N);

/// y = x / sqrt(mean(x^2) + eps) * w.  x, y [T, H].
void rms_norm(const float* x, const float* w, float eps, float* y, int64_t T, int64_t H);
/// y = (x - mean) / sqrt(var + eps) * w + b.  x, y [T, H].
void layer_norm(const float* x, const float* w, const float* b, float eps, float* y, int64_t T, int64_t H);

/// Rotates the first `rotary_dim` dims of each head (rotate-half convention) by `pos`:
/// x[i] * cos + (-x[i + r/2]) * sin for i < r/2, x[i] * cos + x[i - r/2] * sin above.
/// Angles are pos * inv_freq reduced in double precision, so any stream length stays exact.
void rope(float* x, int num_heads, int head_dim, int rotary_dim, const float* inv_freq, int64_t pos);

float silu(float x);
float gelu_erf(float x);
float gelu_tanh(float x);

}  // namespace rill::cpu
