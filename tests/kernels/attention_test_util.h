// Helpers shared by the decode and prefill attention tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/common.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {

/// Slot offset of rel index `rel` in a ring of `ring` slots (non-negative modulo).
inline int ring_offset(long long rel, long long ring) {
  long long r = rel % ring;
  if (r < 0) r += ring;
  return static_cast<int>(r);
}

/// Decode or prefill attention params with the fields every attention test sets: dtype, sequence
/// count, head shapes and the score scale.
template <typename Params>
Params attention_params(kernels::DType dtype, int num_seqs, int num_heads, int num_kv_heads,
                        int head_dim, float scale) {
  Params p;
  p.dtype = dtype;
  p.num_seqs = num_seqs;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.scale = scale;
  return p;
}

inline constexpr int kLinear = INT_MAX;  // SeqSpec::ring_size of a linear (full-policy) cache

/// One decoding sequence: sinks at slots [0, num_sink), the window of window_count tokens ending
/// at rel index head_rel in a ring of ring_size slots (kLinear: a linear cache).
struct SeqSpec {
  int num_sink;
  int ring_size;
  int head_rel;
  int window_count;
};

/// Key slots of a sequence: sinks first (scored with q_sink), then the window, newest first.
struct Key {
  int slot;
  bool sink;
};
inline std::vector<Key> keys_of(const SeqSpec& s, int ring_base) {
  std::vector<Key> keys;
  for (int j = 0; j < s.num_sink; ++j) keys.push_back({j, true});
  for (int d = 0; d < s.window_count; ++d)
    keys.push_back(
        {ring_base + ring_offset(static_cast<long long>(s.head_rel) - d, s.ring_size), false});
  return keys;
}

/// The kernel's descriptor of a sequence whose window starts at slot ring_base, with its block
/// table row on the device.
inline kernels::DecodeSeq decode_seq(const SeqSpec& q, int ring_base, const int32_t* table) {
  kernels::DecodeSeq d;
  d.geo.ring_base = ring_base;
  d.geo.ring_size = q.ring_size;
  d.geo.block_table = table;
  d.num_sink = q.num_sink;
  d.head_rel = q.head_rel;
  d.window_count = q.window_count;
  return d;
}

/// Normalized-error and max-abs tolerances of attention outputs from rounded inputs.
inline double tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 2e-3 : 1e-2; }
inline double max_abs_tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 1e-2 : 4e-2; }

/// The e4m3 bytes of a cache held as floats (layout l: each element quantized with the scale of
/// its K or V half of the block); `cache` becomes what the kernels read back, e4m3 * scale (NaN
/// poison stays NaN). References computed on it see the dequantized cache.
inline std::vector<uint8_t> quantize_cache(std::vector<float>& cache,
                                           const kernels::KvCacheLayout& l) {
  std::vector<uint8_t> bytes(cache.size());
  for (size_t i = 0; i < cache.size(); ++i) {
    const bool is_v = static_cast<int64_t>(i) % l.block_stride() >= l.kv_stride();
    const float scale = is_v ? l.v_scale : l.k_scale;
    bytes[i] = fp8::e4m3_from_float(cache[i] / scale);
    cache[i] = fp8::e4m3_to_float(bytes[i]) * scale;
  }
  return bytes;
}

/// The layout of a test cache of `num_blocks` blocks.
inline kernels::KvCacheLayout cache_layout(int num_blocks, int num_kv_heads, int block_size,
                                           int head_dim, kernels::KvDType kv, float k_scale,
                                           float v_scale) {
  kernels::KvCacheLayout l;
  l.num_blocks = num_blocks;
  l.num_kv_heads = num_kv_heads;
  l.block_size = block_size;
  l.head_dim = head_dim;
  l.cache_dtype = kv;
  l.k_scale = k_scale;
  l.v_scale = v_scale;
  return l;
}

/// Block tables of `used` distinct physical blocks out of `num_blocks`, in random order (so that
/// logical neighbours are not physical ones).
inline std::vector<int32_t> shuffled_blocks(int num_blocks, int used, std::mt19937& rng) {
  std::vector<int32_t> phys(num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  return std::vector<int32_t>(phys.begin(), phys.begin() + used);
}

/// Random normal K and V of one (slot, kv head): `k_row` and the row kv_stride further.
inline void fill_kv(float* k_row, int64_t kv_stride, int head_dim,
                    std::normal_distribution<float>& normal, std::mt19937& rng) {
  for (int d = 0; d < head_dim; ++d) k_row[d] = normal(rng);
  for (int d = 0; d < head_dim; ++d) k_row[kv_stride + d] = normal(rng);
}

/// Turns a float cache into what the kernels read: rounded to the dtype, or (fp8) the e4m3
/// bytes, returned, with `cache` dequantized (quantize_cache).
inline std::vector<uint8_t> finish_cache(std::vector<float>& cache, const kernels::KvCacheLayout& l,
                                         kernels::DType t) {
  if (l.cache_dtype == kernels::KvDType::kFp8E4M3) return quantize_cache(cache, l);
  cache = round_to(cache, t);
  return {};
}

/// Bytes per cache element of a layout.
inline size_t cache_elem_bytes(const kernels::KvCacheLayout& l) {
  return l.cache_dtype == kernels::KvDType::kFp8E4M3 ? 1 : 2;
}

/// Uploads what finish_cache produced into a buffer of cache_elem_bytes(l) elements.
inline void upload_cache(DeviceBuffer& d, const std::vector<float>& cache,
                         const std::vector<uint8_t>& fp8_bytes, const kernels::KvCacheLayout& l,
                         kernels::DType t) {
  if (l.cache_dtype == kernels::KvDType::kFp8E4M3) {
    d.upload(fp8_bytes.data());
  } else {
    d.upload_floats(cache, t);
  }
}

/// The output checks of the attention tests: every element written and finite, and close to the
/// fp64 reference by normalized and by max-abs error.
inline void expect_attention_close(const std::vector<float>& got, const std::vector<float>& want,
                                   kernels::DType t) {
  EXPECT_FALSE(has_nonfinite(got))
      << "non-finite output (a NaN slot was read, or an element was not written)";
  EXPECT_LT(normalized_error(got, want), tolerance(t));
  EXPECT_LT(max_abs_error(got, want), max_abs_tolerance(t));
}

/// "f16" or "bf16", and the fp8 cache with its scales when there is one.
inline std::string describe_types(kernels::DType t, kernels::KvDType kv, float k_scale,
                                  float v_scale) {
  std::string s = t == kernels::DType::kF16 ? "f16" : "bf16";
  if (kv == kernels::KvDType::kFp8E4M3)
    s += " fp8 cache (k_scale " + std::to_string(k_scale) + ", v_scale " + std::to_string(v_scale) +
         ")";
  return s;
}

}  // namespace rill::testing
