// add_norm, rope_kv and activation at decode (T = 1..256) and prefill (T = 2048) sizes of
// Llama-7B (hidden 4096, 32 heads of 128, intermediate 11008). Random data. GB/s counts each
// tensor's bytes once (read and written ones); small T fits in L2, so the decode rows measure
// latency more than bandwidth.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench/bench_util.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/rope.h"

namespace {

using rill::bench::median_ms;
namespace k = rill::kernels;

template <typename T>
T* device_alloc(size_t n) {
  T* p;
  BENCH_CUDA(cudaMalloc(&p, n * sizeof(T)));
  return p;
}
__half* random_half(size_t n, uint32_t seed, cudaStream_t s, float scale = 2.0f,
                    float offset = 0.0f) {
  __half* p = device_alloc<__half>(n);
  rill::bench::fill_uniform_half(p, n, seed, scale, s, offset);
  return p;
}

double report(const char* what, int T, double bytes, const std::function<void()>& fn,
              cudaStream_t s, double copy_gbps) {
  const double ms = median_ms(fn, s, 5, 50);
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-34s T=%5d  %9.4f ms  %8.0f GB/s  %5.1f%% of copy\n", what, T, ms, gbps,
              100.0 * gbps / copy_gbps);
  return ms;
}

constexpr int kTokens[] = {1, 16, 64, 256, 2048};
constexpr int kMaxT = 2048;

void bench_add_norm(cudaStream_t s, double copy_gbps) {
  const int H = 4096;
  float* residual = device_alloc<float>(size_t(kMaxT) * H);
  rill::bench::fill_uniform_float(residual, size_t(kMaxT) * H, 1, 2.0f, s);
  __half *d0 = random_half(size_t(kMaxT) * H, 2, s), *d1 = random_half(size_t(kMaxT) * H, 3, s);
  __half *w0 = random_half(H, 4, s, 0.2f, 1.0f), *w1 = random_half(H, 5, s, 0.2f, 1.0f);
  __half* b = random_half(H, 6, s, 0.1f);
  __half *out0 = device_alloc<__half>(size_t(kMaxT) * H),
         *out1 = device_alloc<__half>(size_t(kMaxT) * H);
  for (int T : kTokens) {
    k::AddNormParams p;
    p.dtype = k::DType::kF16;
    p.num_tokens = T;
    p.hidden = H;
    p.residual = residual;
    p.delta0 = d0;
    p.weight0 = w0;
    p.out0 = out0;
    // Llama: residual += attention output; out = rms_norm(residual) * w.
    report(
        "add_norm rms, 1 delta (4096)", T, double(T) * H * (4 + 4 + 2 + 2) + 2.0 * H,
        [&] { BENCH_CUDA(k::launch_add_norm(p, s)); }, s, copy_gbps);
    // GPT-NeoX parallel residual: two deltas with biases, two LayerNorms.
    p.type = k::NormType::kLayer;
    p.bias0 = b;
    p.delta1 = d1;
    p.bias1 = b;
    p.norm_bias0 = b;
    p.weight1 = w1;
    p.norm_bias1 = b;
    p.out1 = out1;
    report(
        "add_norm layer, 2 deltas, 2 outs", T, double(T) * H * (4 + 4 + 2 + 2 + 2 + 2) + 12.0 * H,
        [&] { BENCH_CUDA(k::launch_add_norm(p, s)); }, s, copy_gbps);
  }
  for (void* q : std::vector<void*>{residual, d0, d1, w0, w1, b, out0, out1})
    BENCH_CUDA(cudaFree(q));
}

void bench_rope(cudaStream_t s, double copy_gbps) {
  const int nh = 32, kvh = 32, hd = 128, width = (nh + 2 * kvh) * hd;
  k::KvCacheLayout layout;
  layout.num_blocks = 4096;  // 64k slots
  layout.num_kv_heads = kvh;
  layout.block_size = 16;
  layout.head_dim = hd;
  __half* qkv = random_half(size_t(kMaxT) * width, 7, s);
  __half* q_sink = device_alloc<__half>(size_t(kMaxT) * nh * hd);
  __half* cache = device_alloc<__half>(size_t(layout.layer_stride()));
  std::vector<int64_t> pos(kMaxT), sink(kMaxT);
  std::vector<int32_t> slots(kMaxT);
  std::vector<float> inv_freq(hd / 2);
  for (int t = 0; t < kMaxT; ++t) {
    pos[t] = 1000000 + t;
    sink[t] = t % 4;
    slots[t] = (t * 7919) % (layout.num_blocks * layout.block_size);  // scattered
  }
  for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  int64_t *d_pos = device_alloc<int64_t>(kMaxT), *d_sink = device_alloc<int64_t>(kMaxT);
  int32_t* d_slots = device_alloc<int32_t>(kMaxT);
  float* d_inv = device_alloc<float>(hd / 2);
  BENCH_CUDA(cudaMemcpy(d_pos, pos.data(), kMaxT * 8, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_sink, sink.data(), kMaxT * 8, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_slots, slots.data(), kMaxT * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_inv, inv_freq.data(), hd / 2 * 4, cudaMemcpyHostToDevice));
  for (int T : kTokens) {
    k::RopeKvParams p;
    p.dtype = k::DType::kF16;
    p.num_tokens = T;
    p.num_heads = nh;
    p.num_kv_heads = kvh;
    p.head_dim = hd;
    p.rotary_dim = hd;
    p.qkv = qkv;
    p.qkv_stride = width;
    p.q_sink = q_sink;
    p.positions = d_pos;
    p.sink_positions = d_sink;
    p.inv_freq = d_inv;
    p.cache_slot = d_slots;
    p.cache = cache;
    p.layout = layout;
    // Reads q, k, v; writes q, k (rotated), q_sink and k, v into the cache.
    const double bytes = double(T) * 2 * (3.0 * nh * hd + 2.0 * nh * hd + nh * hd + 2.0 * kvh * hd);
    report(
        "rope_kv llama-7b (32 x 128)", T, bytes, [&] { BENCH_CUDA(k::launch_rope_kv(p, s)); }, s,
        copy_gbps);
  }
  for (void* q : std::vector<void*>{qkv, q_sink, cache, d_pos, d_sink, d_slots, d_inv})
    BENCH_CUDA(cudaFree(q));
}

void bench_activation(cudaStream_t s, double copy_gbps) {
  const int I = 11008;
  __half* in = random_half(size_t(kMaxT) * 2 * I, 8, s, 6.0f);
  __half* out = device_alloc<__half>(size_t(kMaxT) * 2 * I);
  for (int T : kTokens) {
    k::ActivationParams p;
    p.dtype = k::DType::kF16;
    p.num_tokens = T;
    p.width = I;
    p.in = in;
    p.out = out;
    report(
        "silu_mul (11008)", T, double(T) * I * 2 * 3,
        [&] { BENCH_CUDA(k::launch_activation(p, s)); }, s, copy_gbps);
    p.kind = k::ActKind::kGeluTanh;
    p.width = 4096;
    report(
        "gelu_tanh (4096)", T, double(T) * 4096 * 2 * 2,
        [&] { BENCH_CUDA(k::launch_activation(p, s)); }, s, copy_gbps);
  }
  BENCH_CUDA(cudaFree(in));
  BENCH_CUDA(cudaFree(out));
}

}  // namespace

int main() {
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreate(&s));
  const rill::bench::Ceilings c = rill::bench::measure_ceilings(s);
  std::printf("device: %s, copy bandwidth %.0f GB/s (fp16 data)\n\n", c.device.c_str(),
              c.copy_gbps);
  bench_add_norm(s, c.copy_gbps);
  std::printf("\n");
  bench_rope(s, c.copy_gbps);
  std::printf("\n");
  bench_activation(s, c.copy_gbps);
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
