#include "engine/cpu/cpu_ops.h"

#include <cmath>

namespace rill::cpu {
namespace {

// Eight independent partial sums so the compiler vectorises without reassociating.
// Not instrumented under ThreadSanitizer (scripts/test_tsan.sh): it only reads, and every model
// step spends most of its time here, which made the scheduler's TSan tests take minutes. The
// attribute changes nothing in other builds (inlining included).
__attribute__((no_sanitize("thread"))) inline float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t T,
            int64_t K, int64_t N) {
  // Parallel over output features: each weight row is read once and used for every token.
  pool.parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        constexpr int64_t kTile = 64;  // tokens per tile, keeps x rows in cache
        for (int64_t t0 = 0; t0 < T; t0 += kTile) {
          const int64_t t1 = std::min(T, t0 + kTile);
          for (int64_t n = n0; n < n1; ++n) {
            const float* wr = w + n * K;
            const float b = bias ? bias[n] : 0.0f;
            for (int64_t t = t0; t < t1; ++t) y[t * N + n] = dot(x + t * K, wr, K) + b;
          }
        }
      },
      16);
}

void rms_norm(const float* x, const float* w, float eps, float* y, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * H;
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / H) + eps);
    for (int64_t i = 0; i < H; ++i) y[t * H + i] = xr[i] * inv * w[i];
  }
}

void layer_norm(const float* x, const float* w, const float* b, float eps, float* y, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * H;
    double mean = 0;
    for (int64_t i = 0; i < H; ++i) mean += xr[i];
    mean /= H;
    double var = 0;
    for (int64_t i = 0; i < H; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= H;
    const float inv = 1.0f / std::sqrt(static_cast<float>(var) + eps);
    for (int64_t i = 0; i < H; ++i)
      y[t * H + i] = static_cast<float>(xr[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
  }
}

void rope(float* x, int num_heads, int head_dim, int rotary_dim, const float* inv_freq, int64_t pos) {
  const int half = rotary_dim / 2;
  constexpr double kTwoPi = 6.283185307179586476925;
  for (int i = 0; i < half; ++i) {
    const double angle = std::fmod(static_cast<double>(pos) * static_cast<double>(inv_freq[i]), kTwoPi);
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

}  // namespace rill::cpu
