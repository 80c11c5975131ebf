// rill-attention-bench: decode attention (GB/s of K/V read against the copy ceiling) and prefill
// attention (TFLOP/s against the GEMM ceiling) on random data.
//
// Decode shapes are timed over enough layers (separate caches, one launch each, as in a decode
// step) that the K/V read per timed run exceeds 3x the L2 cache: the figures are DRAM figures.
// Decode runs with a 16-bit cache and with an fp8 (e4m3) cache, whose bytes are half; the first
// rows compare the tensor-core and CUDA-core decode kernels (--decode-kernels: only those).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_random.cuh"
#include "bench/bench_util.h"
#include "rill/kernels/attention.h"

namespace {

using rill::kernels::DecodeAttentionParams;
using rill::kernels::DecodeSeq;
using rill::kernels::DType;
using rill::kernels::KvCacheLayout;
using rill::kernels::KvDType;
using rill::kernels::PrefillAttentionParams;
using rill::kernels::PrefillSeq;

constexpr int kBlock = 16;

void* alloc_random(size_t elems, uint32_t seed, float scale, cudaStream_t stream) {
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(elems, 8) * 2));
  rill::bench::fill_uniform_half(p, elems, seed, 2.0f * scale, stream);  // [-scale, scale)
  return p;
}

/// Random e4m3 bytes of magnitude below 2 (exponent field <= 7: never NaN).
__global__ void fill_random_fp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t x = rill::bench::hash_index(i, seed);
    p[i] = static_cast<uint8_t>((x & 0x80u) | (x >> 8 & 0x3fu));
  }
}

/// A cache of `elems` elements of random values: fp16 bits, or e4m3 bytes.
void* alloc_random_cache(size_t elems, KvDType kv, uint32_t seed, cudaStream_t stream) {
  if (kv == KvDType::kSame) return alloc_random(elems, seed, 1.0f, stream);
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(elems, 16)));
  fill_random_fp8<<<1024, 256, 0, stream>>>(static_cast<uint8_t*>(p), elems, seed);
  BENCH_CUDA(cudaGetLastError());
  return p;
}

/// Block table rows of `batch` sequences of `blocks` blocks each, at shuffled physical blocks.
int32_t* shuffled_tables(int batch, int blocks, std::mt19937& rng) {
  std::vector<int32_t> t(static_cast<size_t>(batch) * blocks);
  std::iota(t.begin(), t.end(), 0);
  std::shuffle(t.begin(), t.end(), rng);
  int32_t* d = nullptr;
  BENCH_CUDA(cudaMalloc(&d, t.size() * 4));
  BENCH_CUDA(cudaMemcpy(d, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

/// Splits for a decode launch: about 8 CTAs per SM (several waves, small tail), keeping >= 64
/// keys per split.
int pick_splits(int batch, int kv_heads, int keys, int sms) {
  const int ctas = batch * kv_heads;
  const int want = (8 * sms + ctas - 1) / ctas;
  return std::max(1, std::min(want, std::max(1, keys / 64)));
}

struct DecodeShape {
  int batch, keys, heads, kv_heads, head_dim;
};

/// Which decode kernel a row times (DecodeAttentionParams::use_mma).
const char* kernel_name(int use_mma) {
  return use_mma < 0 ? "auto" : use_mma == 0 ? "cores" : "mma";
}

void bench_decode(const DecodeShape& s, KvDType kv, int splits, const rill::bench::Ceilings& ceil,
                  size_t l2, cudaStream_t stream, DType dtype = DType::kF16, int use_mma = -1) {
  std::mt19937 rng(7);
  const int blocks_per_seq = (s.keys + kBlock - 1) / kBlock;
  KvCacheLayout layout;
  layout.num_blocks = s.batch * blocks_per_seq;
  layout.num_kv_heads = s.kv_heads;
  layout.block_size = kBlock;
  layout.head_dim = s.head_dim;
  layout.cache_dtype = kv;
  const double kv_bytes = 2.0 * s.batch * s.keys * s.kv_heads * s.head_dim * layout.element_bytes();
  const int layers = std::max(1, static_cast<int>(3.0 * l2 / kv_bytes) + 1);

  void* cache = alloc_random_cache(layout.layer_stride() * layers, kv, 11, stream);
  void* q = alloc_random(static_cast<size_t>(s.batch) * s.heads * s.head_dim, 12, 1.0f, stream);
  void* out = nullptr;
  BENCH_CUDA(cudaMalloc(&out, static_cast<size_t>(s.batch) * s.heads * s.head_dim * 2));
  int32_t* tables = shuffled_tables(s.batch, blocks_per_seq, rng);
  std::vector<DecodeSeq> seqs(s.batch);
  for (int b = 0; b < s.batch; ++b) {
    seqs[b].geo.block_table = tables + static_cast<size_t>(b) * blocks_per_seq;
    seqs[b].head_rel = s.keys - 1;
    seqs[b].window_count = s.keys;
  }
  DecodeSeq* d_seqs = nullptr;
  BENCH_CUDA(cudaMalloc(&d_seqs, seqs.size() * sizeof(DecodeSeq)));
  BENCH_CUDA(
      cudaMemcpy(d_seqs, seqs.data(), seqs.size() * sizeof(DecodeSeq), cudaMemcpyHostToDevice));
  void* ws = nullptr;
  const size_t ws_bytes =
      rill::kernels::decode_attention_workspace_bytes(s.batch, s.heads, s.head_dim, splits);
  if (ws_bytes) BENCH_CUDA(cudaMalloc(&ws, ws_bytes));
  if (ws_bytes) BENCH_CUDA(cudaMemset(ws, 0, ws_bytes));  // split counters start at zero

  DecodeAttentionParams p;
  p.dtype = dtype;
  p.use_mma = use_mma;
  p.num_seqs = s.batch;
  p.num_heads = s.heads;
  p.num_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.q = q;
  p.q_stride = static_cast<int64_t>(s.heads) * s.head_dim;
  p.q_sink = q;
  p.q_sink_stride = p.q_stride;
  p.seqs = d_seqs;
  p.layout = layout;
  p.out = out;
  p.num_splits = splits;
  p.min_keys_per_split = 16;
  p.workspace = ws;
  const auto run = [&] {
    for (int l = 0; l < layers; ++l) {
      p.cache =
          static_cast<const char*>(cache) + l * layout.layer_stride() * layout.element_bytes();
      BENCH_CUDA(rill::kernels::launch_decode_attention(p, stream));
    }
  };
  const double ms = rill::bench::median_ms(run, stream, 3, 20) / layers;
  const double gbps = kv_bytes / (ms * 1e-3) / 1e9;
  const char* elems = kv == KvDType::kFp8E4M3 ? "fp8" : dtype == DType::kF16 ? "f16" : "bf16";
  std::printf(
      "decode %-4s %-5s batch %4d x %5d keys  heads %2d/%2d x %3d  splits %3d  %8.4f ms  "
      "%7.1f GB/s  %5.1f%% of copy\n",
      elems, kernel_name(use_mma), s.batch, s.keys, s.heads, s.kv_heads, s.head_dim, splits, ms,
      gbps, 100.0 * gbps / ceil.copy_gbps);
  BENCH_CUDA(cudaFree(cache));
  BENCH_CUDA(cudaFree(q));
  BENCH_CUDA(cudaFree(out));
  BENCH_CUDA(cudaFree(tables));
  BENCH_CUDA(cudaFree(d_seqs));
  if (ws) BENCH_CUDA(cudaFree(ws));
}

struct PrefillShape {
  int batch, tokens, heads, kv_heads, head_dim;
};

void bench_prefill(const PrefillShape& s, DType dtype, const rill::bench::Ceilings& ceil,
                   cudaStream_t stream) {
  const int qkv_stride = (s.heads + 2 * s.kv_heads) * s.head_dim;
  const size_t rows = static_cast<size_t>(s.batch) * s.tokens;
  KvCacheLayout layout;
  layout.num_blocks = 1;
  layout.num_kv_heads = s.kv_heads;
  layout.block_size = kBlock;
  layout.head_dim = s.head_dim;
  // Random bits are valid bf16 values too (|x| <= 1 either way, reinterpreted): fine for timing.
  void* qkv = alloc_random(rows * qkv_stride, 21, 1.0f, stream);
  void* q_sink = alloc_random(rows * s.heads * s.head_dim, 22, 1.0f, stream);
  void* cache = alloc_random(layout.layer_stride(), 23, 1.0f, stream);
  void* out = nullptr;
  BENCH_CUDA(cudaMalloc(&out, rows * s.heads * s.head_dim * 2));
  int32_t* table = nullptr;
  BENCH_CUDA(cudaMalloc(&table, 4));
  BENCH_CUDA(cudaMemset(table, 0, 4));
  std::vector<PrefillSeq> seqs(s.batch);
  for (int b = 0; b < s.batch; ++b) {
    seqs[b].geo.block_table = table;
    seqs[b].q_offset = b * s.tokens;
    seqs[b].num_tokens = s.tokens;
  }
  PrefillSeq* d_seqs = nullptr;
  BENCH_CUDA(cudaMalloc(&d_seqs, seqs.size() * sizeof(PrefillSeq)));
  BENCH_CUDA(
      cudaMemcpy(d_seqs, seqs.data(), seqs.size() * sizeof(PrefillSeq), cudaMemcpyHostToDevice));

  PrefillAttentionParams p;
  p.dtype = dtype;
  p.num_seqs = s.batch;
  p.num_heads = s.heads;
  p.num_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.qkv = qkv;
  p.qkv_stride = qkv_stride;
  p.q_sink = q_sink;
  p.seqs = d_seqs;
  p.cache = cache;
  p.layout = layout;
  p.out = out;
  p.max_tokens = s.tokens;
  const double ms = rill::bench::median_ms(
      [&] { BENCH_CUDA(rill::kernels::launch_prefill_attention(p, stream)); }, stream, 3, 20);
  // Causal: 2 GEMMs (QK^T, PV) of 2 * T * T / 2 * head_dim flops each, per head and sequence.
  const double flops = 4.0 * s.tokens * s.tokens / 2 * s.head_dim * s.heads * s.batch;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  std::printf(
      "prefill %s batch %d x %5d tokens  heads %2d/%2d x %3d  %8.3f ms  %6.1f TFLOP/s  %5.1f%% of "
      "GEMM\n",
      dtype == DType::kF16 ? "f16 " : "bf16", s.batch, s.tokens, s.heads, s.kv_heads, s.head_dim,
      ms, tflops, 100.0 * tflops / ceil.gemm_tflops);
  BENCH_CUDA(cudaFree(qkv));
  BENCH_CUDA(cudaFree(q_sink));
  BENCH_CUDA(cudaFree(cache));
  BENCH_CUDA(cudaFree(out));
  BENCH_CUDA(cudaFree(table));
  BENCH_CUDA(cudaFree(d_seqs));
}

}  // namespace

/// The tensor-core decode kernel against the CUDA-core one for Llama-3-8B's attention (32 query
/// heads, 8 kv heads, head_dim 128) with bf16 and fp8 caches: the serving shape (256 sequences of
/// 387 keys) and smaller batches (splits as pick_splits chooses them).
void bench_decode_kernels(const rill::bench::Ceilings& ceil, const cudaDeviceProp& prop,
                          cudaStream_t stream) {
  const DecodeShape shapes[] = {{256, 387, 32, 8, 128}, {1, 387, 32, 8, 128},
                                {4, 387, 32, 8, 128},   {16, 387, 32, 8, 128},
                                {64, 387, 32, 8, 128},  {64, 1024, 32, 8, 128},
                                {1, 4096, 32, 8, 128},  {256, 387, 32, 4, 128}};
  for (const DecodeShape& s : shapes)
    for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
      for (int use_mma : {0, 1}) {
        const int splits = pick_splits(s.batch, s.kv_heads, s.keys, prop.multiProcessorCount);
        bench_decode(s, kv, splits, ceil, prop.l2CacheSize, stream, DType::kBF16, use_mma);
      }
}

int main(int argc, char** argv) {
  // --decode-kernels: only the tensor-core / CUDA-core decode comparison.
  const bool kernels_only = argc > 1 && std::string(argv[1]) == "--decode-kernels";
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const rill::bench::Ceilings ceil = rill::bench::measure_ceilings(stream);
  int dev = 0;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s: %d SMs, L2 %.0f MB; copy %.0f GB/s, fp16 GEMM %.0f TFLOP/s\n",
              ceil.device.c_str(), prop.multiProcessorCount, prop.l2CacheSize / 1e6, ceil.copy_gbps,
              ceil.gemm_tflops);

  bench_decode_kernels(ceil, prop, stream);
  if (kernels_only) {
    BENCH_CUDA(cudaStreamDestroy(stream));
    return 0;
  }
  const DecodeShape decode_shapes[] = {
      {1, 4096, 32, 32, 128}, {1, 4096, 32, 8, 128},   {64, 1024, 32, 32, 128},
      {64, 1024, 32, 8, 128}, {128, 128, 32, 32, 128}, {128, 128, 32, 8, 128},
      {64, 1024, 32, 8, 64},  {64, 1024, 64, 8, 128},
  };
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (const DecodeShape& s : decode_shapes) {
      const int splits = pick_splits(s.batch, s.kv_heads, s.keys, prop.multiProcessorCount);
      bench_decode(s, kv, splits, ceil, prop.l2CacheSize, stream);
    }
  // How the split count matters for a single long sequence.
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (int splits : {1, 4, 8, 16, 32, 64})
      bench_decode({1, 4096, 32, 32, 128}, kv, splits, ceil, prop.l2CacheSize, stream);
  for (int splits : {1, 4, 16, 32, 64})
    bench_decode({1, 4096, 32, 8, 128}, KvDType::kSame, splits, ceil, prop.l2CacheSize, stream);

  const PrefillShape prefill_shapes[] = {
      {1, 2048, 32, 32, 128}, {1, 2048, 32, 8, 128}, {4, 2048, 32, 8, 128}, {1, 2048, 32, 32, 64}};
  for (const PrefillShape& s : prefill_shapes) bench_prefill(s, DType::kF16, ceil, stream);
  bench_prefill(prefill_shapes[0], DType::kBF16, ceil, stream);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
