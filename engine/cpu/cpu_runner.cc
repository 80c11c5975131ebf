#include "engine/cpu/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "engine/cpu/cpu_ops.h"
#include "engine/error.h"
#include "engine/model/fp8.h"
#include "engine/model/fp8_weights.h"
#include "engine/runner/cache_identity.h"
#include "engine/runner/logprobs.h"
#include "engine/runner/step_validation.h"

namespace rill {

namespace cpu {

// How the CUDA runner quantizes the input of one fp8 (fused) linear layer for its W8A8 GEMM.
struct Fp8ActQuant {
  bool on = false;         // an fp8 layer
  bool group = false;      // block-scaled weights: per token and 128 columns
  float static_scale = 0;  // every part's static input scale, the largest (else 0: dynamic)
};

}  // namespace cpu

using cpu::Fp8ActQuant;

struct CpuRunner::Layer {
  std::vector<float> attn_norm, attn_norm_b, mlp_norm, mlp_norm_b;
  Fp8ActQuant qkv_q, o_q, up_q, down_q;  // gate and up share their input (up_q)
  std::vector<float> wqkv, bqkv;  // [qkv_dim, hidden]: q rows, then k, then v
  std::vector<float> wo, bo;      // [hidden, q_dim]
  std::vector<float> wgate, bgate, wup, bup;  // [intermediate, hidden]
  std::vector<float> wdown, bdown;            // [hidden, intermediate]
  KvScales kv_scales;  // of the emulated fp8 cache (1 unless the checkpoint calibrated them)
};

struct CpuRunner::Chunk {
  SeqId id;
  const KvSequence* seq;
  int64_t start;  // stream position of the first token
  int64_t row;    // first row in the step's token matrix
  int64_t len;
};

namespace {

std::vector<float> f32(const Tensor& t) { return t.present() ? t.to_f32() : std::vector<float>{}; }

// A linear layer's weight in fp32: dequantized when fp8; with `fp8`, a 16/32-bit weight is first
// quantized per channel, as the CUDA runner does at load.
std::vector<float> linear(const Tensor& t, bool fp8) {
  if (!t.present()) return {};
  return fp8 ? quantize_fp8_per_channel(t).to_f32() : t.to_f32();
}

// Blocks of `block_bytes` (all layers' K and V) in a budget of `budget` bytes. Block ids are
// ints, so a budget of more than 2^31 - 1 blocks is refused rather than truncated (a truncated
// count wrapped negative and was reported as "too small").
int pool_blocks(int64_t budget, int64_t block_bytes) {
  const int64_t blocks = budget / block_bytes;
  if (blocks <= 0)
    throw Error(ErrorCode::kInvalidArgument, "cpu_kv_cache_bytes: a budget of " +
                                                 std::to_string(budget) +
                                                 " bytes is too small for one KV block of " +
                                                 std::to_string(block_bytes) + " bytes");
  if (blocks > std::numeric_limits<int32_t>::max())
    throw Error(ErrorCode::kInvalidArgument,
                "cpu_kv_cache_bytes: a budget of " + std::to_string(budget) + " bytes is " +
                    std::to_string(blocks) + " KV blocks, more than the pool's limit of " +
                    std::to_string(std::numeric_limits<int32_t>::max()));
  return static_cast<int>(blocks);
}

// The activation quantization of the fused layer of `parts` as the CUDA runner holds it
// (cuda_weights.cc, fp8_image.cc): fp8 when `fp8` (every decoder layer under kFp8); per 128
// columns when any part has block scales; static when every part is fp8 with an input scale.
Fp8ActQuant act_quant(std::initializer_list<const Tensor*> parts, bool fp8) {
  Fp8ActQuant q;
  bool all_static = true;
  float scale = 0;
  for (const Tensor* t : parts) {
    if (!t->present()) continue;
    q.on = fp8;
    if (!is_fp8(*t)) {
      all_static = false;
      continue;
    }
    const Fp8Scales s = t->scales->per_row();
    q.group = q.group || s.block_cols < s.cols;
    all_static = all_static && s.input_scale > 0;
    scale = std::max(scale, s.input_scale);
  }
  if (!q.group && all_static) q.static_scale = scale;
  return q;
}

// u in [-1, 1) from a counter hash of (seed, key, i) (splitmix64's finaliser).
float jitter_unit(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + key * 0xD1B54A32D192ED03ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
}

// CpuRunnerOptions::fp8_activation_jitter: x [T, K] (the input of a layer [n, K]) times
// 1 + u * jitter.
void jitter_activations(float* x, int64_t T, int64_t n, int64_t K, float jitter, uint32_t seed) {
  const uint64_t key = static_cast<uint64_t>(n) << 32 | static_cast<uint64_t>(K);
  for (int64_t i = 0; i < T * K; ++i)
    x[i] *= 1.0f + jitter * jitter_unit(seed, key, static_cast<uint64_t>(i));
}

// x [T, K] rounded through e4m3 as kernels/src/quantize_fp8.cu does for a W8A8 GEMM: with the
// static scale, or per token (per 128-column group) with max |x| / 448 (1 for a zero span).
void round_activations(const Fp8ActQuant& q, float* x, int64_t T, int64_t K) {
  const int64_t span = q.group ? 128 : K;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c0 = 0; c0 < K; c0 += span) {
      float* v = x + t * K + c0;
      const int64_t n = std::min(span, K - c0);
      float scale = q.static_scale;
      if (scale <= 0) {
        float amax = 0;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(v[i]));
        scale = amax > 0 ? amax / 448.0f : 1.0f;
      }
      for (int64_t i = 0; i < n; ++i) v[i] = fp8::e4m3_round_trip(v[i], scale);
    }
}

std::vector<float> concat(std::initializer_list<const Tensor*> parts, bool fp8) {
  std::vector<float> out;
  for (const Tensor* t : parts) {
    if (!t->present()) continue;
    auto v = linear(*t, fp8);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

CpuRunner::CpuRunner(const Model& model, const CpuRunnerOptions& opt)
    : config_(model.config), tp_comm_(opt.tp_comm), tp_rank_(opt.tp_rank) {
  const ModelConfig& c = config_;
  const int world = tp_comm_ ? tp_comm_->world() : 1;
  vocab_ = tp::vocab_range(c.vocab_size, world, tp_rank_);
  fp8_kv_ = opt.kv_cache_dtype == KvCacheDType::kFp8E4M3;
  const bool fp8 = opt.quantization == WeightQuant::kFp8;
  fp8_act_rows_ = fp8 ? opt.fp8_activation_rows : -1;
  fp8_gemm_rows_ = opt.fp8_gemm_rows;
  fp8_jitter_ = opt.fp8_activation_jitter;
  fp8_jitter_seed_ = opt.fp8_activation_jitter_seed;
  if (fp8 && !c.tie_word_embeddings && is_fp8(model.weights.lm_head)) {
    const Fp8ActQuant q = act_quant({&model.weights.lm_head}, true);
    head_fp8_ = true;
    head_group_ = q.group;
    head_static_scale_ = q.static_scale;
  }
  pool_ = std::make_unique<ThreadPool>(opt.num_threads);
  embed_ = f32(model.weights.embed);
  lm_head_ = c.tie_word_embeddings ? std::vector<float>{} : f32(model.weights.lm_head);
  final_norm_ = f32(model.weights.final_norm);
  final_norm_b_ = f32(model.weights.final_norm_bias);
  inv_freq_ = c.rope.inv_freq();
  for (const LayerWeights& w : model.weights.layers) {
    Layer l;
    l.attn_norm = f32(w.attn_norm);
    l.attn_norm_b = f32(w.attn_norm_bias);
    l.mlp_norm = f32(w.mlp_norm);
    l.mlp_norm_b = f32(w.mlp_norm_bias);
    l.qkv_q = act_quant({&w.q, &w.k, &w.v}, fp8);
    l.o_q = act_quant({&w.o}, fp8);
    l.up_q = c.gated_mlp ? act_quant({&w.gate, &w.up}, fp8) : act_quant({&w.up}, fp8);
    l.down_q = act_quant({&w.down}, fp8);
    l.wqkv = concat({&w.q, &w.k, &w.v}, fp8);
    if (c.qkv_bias) l.bqkv = concat({&w.q_bias, &w.k_bias, &w.v_bias}, false);
    l.wo = linear(w.o, fp8);
    l.bo = f32(w.o_bias);
    l.wgate = linear(w.gate, fp8);
    l.bgate = f32(w.gate_bias);
    l.wup = linear(w.up, fp8);
    l.bup = f32(w.up_bias);
    l.wdown = linear(w.down, fp8);
    l.bdown = f32(w.down_bias);
    l.kv_scales = w.kv_scales;
    layers_.push_back(std::move(l));
  }
  const int64_t block_floats = 2ll * c.num_kv_heads * opt.block_size * c.head_dim;
  num_blocks_ = opt.num_blocks > 0
                    ? opt.num_blocks
                    : pool_blocks(opt.kv_cache_bytes, block_floats * 4 * c.num_layers);
  // Uninitialised on purpose: pages are touched only when blocks are used.
  const size_t pool_floats = static_cast<size_t>(num_blocks_) * block_floats * c.num_layers;
  try {
    cache_.reset(new float[pool_floats]);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, "cpu_kv_cache_bytes: cannot allocate a KV pool of " +
                                                   std::to_string(pool_floats * 4) + " bytes");
  }
  kv_ = std::make_unique<KvCacheManager>(
      num_blocks_, opt.block_size, c.max_position_embeddings, c.sliding_window,
      kv_cache_identity(model, "cpu", "float32", fp8_kv_ ? "fp8_e4m3" : "float32"));
  host_blocks_ = static_cast<int>(std::min<int64_t>(opt.host_kv_cache_bytes / (block_floats * 4 * c.num_layers), INT32_MAX));
}

CpuRunner::~CpuRunner() = default;

void CpuRunner::emulate_w8a8(const Fp8ActQuant& q, float* x, int64_t T, int64_t n, int64_t K,
                             bool lm_head) const {
  if (!q.on || fp8_act_rows_ < 0 || T <= fp8_act_rows_) return;
  const int64_t rows =
      fp8_gemm_rows_ ? std::min(T, fp8_gemm_rows_({T, n, K, q.group, step_prefill_, lm_head})) : T;
  if (fp8_jitter_ > 0) jitter_activations(x, rows, n, K, fp8_jitter_, fp8_jitter_seed_);
  round_activations(q, x, rows, K);
}

void CpuRunner::add_sequence(const SequenceSpec& spec) {
  validate_sequence(spec, config_.vocab_size);
  if (seqs_.count(spec.id)) throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(spec.id) + " exists");
  kv_->add_sequence(spec.id, spec.cache, spec.prefix ? &*spec.prefix : nullptr);
  SeqState s;
  s.sampling = spec.sampling;
  s.sampler = SamplerState::resumed(spec.generated);
  if (spec.sampling.repetition_penalty != 1.0f) {
    s.sampler.prompt_seen.assign(config_.vocab_size, 0);
    if (spec.prefix)  // cached tokens count as prompt, as if they had been fed
      for (int32_t t : spec.prefix_tokens.first(static_cast<size_t>(spec.prefix->tokens)))
        s.sampler.prompt_seen[t] = 1;
  }
  seqs_.emplace(spec.id, std::move(s));
}

void CpuRunner::remove_sequence(SeqId id) {
  kv_->remove_sequence(id);
  seqs_.erase(id);
  last_sampled_.erase(id);
  if (auto it = offloaded_.find(id); it != offloaded_.end()) {
    host_blocks_used_ -= static_cast<int>(it->second.size() / (block_floats() * config_.num_layers));
    offloaded_.erase(it);
  }
}

void CpuRunner::restart_sampling(SeqId id, const SamplingParams& sampling) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  validate_sequence({id, kv_->sequence(id).policy, sampling}, config_.vocab_size);
  SeqState& s = it->second;
  s.sampling = sampling;
  s.sampler = SamplerState{};
  if (sampling.repetition_penalty != 1.0f) s.sampler.prompt_seen.assign(config_.vocab_size, 0);
  last_sampled_.erase(id);
}

int64_t CpuRunner::block_floats() const {
  return 2ll * config_.num_kv_heads * kv_->block_size() * config_.head_dim;
}

void CpuRunner::offload_sequence(SeqId id) {
  if (!seqs_.count(id)) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  const int n = kv_->blocks_held(id);
  if (n > host_kv_blocks_free())
    throw Error(ErrorCode::kResourceExhausted, "host KV memory full: offloading sequence " + std::to_string(id) +
                                                   " needs " + std::to_string(n) + " blocks, " +
                                                   std::to_string(host_kv_blocks_free()) + " free");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t bf = block_floats(), L = config_.num_layers;
  std::vector<float> host(static_cast<size_t>(n * L * bf));
  const std::vector<int32_t> table = kv_->release_blocks(id);
  for (int b = 0; b < n; ++b)
    for (int l = 0; l < L; ++l)
      std::copy_n(kv_ptr(l, table[b], 0, 0, 0), bf, host.data() + (b * L + l) * bf);
  host_blocks_used_ += n;
  offloaded_[id] = std::move(host);
  transfers_.push_back({false, n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
}

void CpuRunner::restore_sequence(SeqId id) {
  auto it = offloaded_.find(id);
  if (it == offloaded_.end()) throw Error(ErrorCode::kNotFound, "sequence " + std::to_string(id) + " is not offloaded");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<bool> from_cache;
  const std::vector<int32_t>& table = kv_->reacquire_blocks(id, &from_cache);
  const int64_t bf = block_floats(), L = config_.num_layers;
  for (size_t b = 0; b < table.size(); ++b)
    for (int l = 0; l < L && !from_cache[b]; ++l)
      std::copy_n(it->second.data() + (static_cast<int64_t>(b) * L + l) * bf, bf, kv_ptr(l, table[b], 0, 0, 0));
  host_blocks_used_ -= static_cast<int>(table.size());
  offloaded_.erase(it);
  transfers_.push_back({true, static_cast<int>(table.size()),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
}

void CpuRunner::copy_blocks(const std::vector<BlockCopy>& copies) {
  const int64_t bf = block_floats();
  for (const BlockCopy& c : copies)
    for (int l = 0; l < config_.num_layers; ++l)
      std::copy_n(kv_ptr(l, c.src, 0, 0, 0), bf, kv_ptr(l, c.dst, 0, 0, 0));
}

float* CpuRunner::kv_ptr(int layer, int32_t block, int kv, int head, int offset) {
  const ModelConfig& c = config_;
  const int bs = kv_->block_size();
  const int64_t idx = (((static_cast<int64_t>(layer) * num_blocks_ + block) * 2 + kv) * c.num_kv_heads + head) *
                          bs * c.head_dim + static_cast<int64_t>(offset) * c.head_dim;
  return cache_.get() + idx;
}

void CpuRunner::norm(const std::vector<float>& w, const std::vector<float>& b, const float* x, float* y,
                     int64_t T) const {
  if (config_.norm == NormKind::kRmsNorm) cpu::rms_norm(x, w.data(), config_.norm_eps, y, T, config_.hidden_size);
  else cpu::layer_norm(x, w.data(), b.empty() ? nullptr : b.data(), config_.norm_eps, y, T, config_.hidden_size);
}

// Attention of one chunk's queries. Keys before the chunk come from the cache (as it was before
// this step), the chunk's own keys from `qkv`; each query i sees the sinks [0, min(S, i+1)) with
// its query rotated at the in-cache position, and positions [max(S, i-W+1), i] with the query
// rotated at i (keys are stored rotated at their stream position).  qkv [len, qkv_dim] (q and
// k already rotated), out [len, q_dim]. A chunk stored before attention reads its own K/V from
// the cache too.
void CpuRunner::attention(int layer, const Chunk& c, const float* qkv, float* out) {
  const ModelConfig& cf = config_;
  const KvGeometry& g = c.seq->geometry;
  const int hd = cf.head_dim, qkv_dim = cf.qkv_dim(), group = cf.num_heads / cf.num_kv_heads;
  const int bs = kv_->block_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool_->parallel_for(c.len * cf.num_heads, [&](int64_t b, int64_t e) {
    std::vector<float> scores, q_sink(hd), acc(hd);
    for (int64_t job = b; job < e; ++job) {
      const int64_t t = job / cf.num_heads;
      const int h = static_cast<int>(job % cf.num_heads), kh = h / group;
      const int64_t i = c.start + t;
      const float* q = qkv + t * qkv_dim + h * hd;
      auto key = [&](int64_t j, int kv) -> const float* {
        if (j >= c.start && !stores_before_attention(c))
          return qkv + (j - c.start) * qkv_dim + cf.q_dim() + kv * cf.kv_dim() + kh * hd;
        const long long slot = g.slot(j);
        return kv_ptr(layer, c.seq->block_table[slot / bs], kv, kh, static_cast<int>(slot % bs));
      };
      const int64_t n_sink = std::min<int64_t>(g.n_sink, i + 1);
      const int64_t lo = g.window ? std::max<int64_t>(g.n_sink, i - g.window + 1) : g.n_sink;
      const int64_t n_win = std::max<int64_t>(0, i - lo + 1);
      if (n_sink > 0) {  // the query as the paper positions it among the sinks
        std::memcpy(q_sink.data(), q, hd * sizeof(float));
        const int64_t qp = g.sink_query_pos(i);
        if (qp != i) cpu::rope(q_sink.data(), 1, hd, cf.rope.rotary_dim, inv_freq_.data(), qp - i);
      }
      scores.resize(n_sink + n_win);
      for (int64_t j = 0; j < n_sink; ++j) {
        const float* k = key(j, 0);
        float s = 0;
        for (int d = 0; d < hd; ++d) s += q_sink[d] * k[d];
        scores[j] = s * scale;
      }
      for (int64_t j = 0; j < n_win; ++j) {
        const float* k = key(lo + j, 0);
        float s = 0;
        for (int d = 0; d < hd; ++d) s += q[d] * k[d];
        scores[n_sink + j] = s * scale;
      }
      const float mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (float& s : scores) sum += (s = std::exp(s - mx));
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n_sink + n_win; ++j) {
        const float* v = key(j < n_sink ? j : lo + (j - n_sink), 1);
        const float p = static_cast<float>(scores[j] / sum);
        for (int d = 0; d < hd; ++d) acc[d] += p * v[d];
      }
      std::memcpy(out + t * cf.q_dim() + h * hd, acc.data(), hd * sizeof(float));
    }
  });
}

// Stores the chunk's (rotated) keys and values (rounded through e4m3 for an fp8 cache). In a ring
// only the last ring_tokens positions survive the chunk, so earlier ones are not written (they
// would be overwritten anyway).
void CpuRunner::write_kv(int layer, const Chunk& c, const float* qkv) {
  const ModelConfig& cf = config_;
  const KvGeometry& g = c.seq->geometry;
  const int hd = cf.head_dim, bs = kv_->block_size();
  const int64_t end = c.start + c.len;
  for (int64_t t = 0; t < c.len; ++t) {
    const int64_t j = c.start + t;
    if (g.ring_tokens && j >= g.n_sink && j < end - g.ring_tokens) continue;
    const long long slot = g.slot(j);
    const int32_t block = c.seq->block_table[slot / bs];
    for (int kv = 0; kv < 2; ++kv)
      for (int kh = 0; kh < cf.num_kv_heads; ++kh) {
        float* dst = kv_ptr(layer, block, kv, kh, static_cast<int>(slot % bs));
        const float* src = qkv + t * cf.qkv_dim() + cf.q_dim() + kv * cf.kv_dim() + kh * hd;
        if (fp8_kv_) {
          const KvScales& s = layers_[layer].kv_scales;
          for (int d = 0; d < hd; ++d) dst[d] = fp8::e4m3_round_trip(src[d], kv ? s.v : s.k);
        } else {
          std::memcpy(dst, src, hd * sizeof(float));
        }
      }
  }
}

// Prefill chunks attend to their fresh K/V and store it afterwards. With an fp8 cache, decode
// tokens (chunks of one) are stored first and attend to their own K/V as stored, which is what
// the CUDA runner's decode path does (the window never needs the slot a decode token overwrites).
bool CpuRunner::stores_before_attention(const Chunk& c) const {
  return fp8_kv_ && c.len == 1;
}

void CpuRunner::mlp(const Layer& l, const float* h, float* out, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t I = c.intermediate_size, H = c.hidden_size;
  std::vector<float> up(T * I);
  std::vector<float> hq;
  if (l.up_q.on && fp8_act_rows_ >= 0) {
    hq.assign(h, h + T * H);
    emulate_w8a8(l.up_q, hq.data(), T, c.gated_mlp ? 2 * I : I, H);  // gate | up fused
    h = hq.data();
  }
  cpu::matmul(*pool_, h, l.wup.data(), l.bup.empty() ? nullptr : l.bup.data(), up.data(), T, H, I);
  auto act = c.act == Activation::kSilu ? cpu::silu : c.act == Activation::kGeluErf ? cpu::gelu_erf : cpu::gelu_tanh;
  if (c.gated_mlp) {
    std::vector<float> gate(T * I);
    cpu::matmul(*pool_, h, l.wgate.data(), l.bgate.empty() ? nullptr : l.bgate.data(), gate.data(), T, H, I);
    for (int64_t i = 0; i < T * I; ++i) up[i] *= act(gate[i]);
  } else {
    for (float& v : up) v = act(v);
  }
  emulate_w8a8(l.down_q, up.data(), T, H, I);
  const bool bias = !tp_comm_ && !l.bdown.empty();  // with TP: added after the sum
  cpu::matmul(*pool_, up.data(), l.wdown.data(), bias ? l.bdown.data() : nullptr, out, T, I, H);
  tp_reduce(out, T * H, l.bdown);
}

void CpuRunner::tp_reduce(float* x, int64_t n, const std::vector<float>& bias) const {
  if (!tp_comm_) return;
  tp_comm_->all_reduce_sum(tp_rank_, x, static_cast<size_t>(n));
  const int64_t H = config_.hidden_size;
  if (!bias.empty())
    for (int64_t i = 0; i < n; ++i) x[i] += bias[static_cast<size_t>(i % H)];
}

// The decoder stack over the step's token matrix: x [T, H] holds the residual stream.
void CpuRunner::forward_layers(const std::vector<Chunk>& chunks, std::vector<float>& x, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, qkv_dim = c.qkv_dim();
  std::vector<float> h(T * H), qkv(T * qkv_dim), attn(T * c.q_dim()), o(T * H), m(T * H);
  for (int li = 0; li < c.num_layers; ++li) {
    const Layer& l = layers_[li];
    norm(l.attn_norm, l.attn_norm_b, x.data(), h.data(), T);
    emulate_w8a8(l.qkv_q, h.data(), T, qkv_dim, H);
    cpu::matmul(*pool_, h.data(), l.wqkv.data(), l.bqkv.empty() ? nullptr : l.bqkv.data(), qkv.data(), T, H, qkv_dim);
    for (const Chunk& ch : chunks)
      for (int64_t t = 0; t < ch.len; ++t) {
        float* row = &qkv[(ch.row + t) * qkv_dim];
        cpu::rope(row, c.num_heads, c.head_dim, c.rope.rotary_dim, inv_freq_.data(), ch.start + t);
        cpu::rope(row + c.q_dim(), c.num_kv_heads, c.head_dim, c.rope.rotary_dim, inv_freq_.data(), ch.start + t);
      }
    for (const Chunk& ch : chunks)
      if (stores_before_attention(ch)) write_kv(li, ch, &qkv[ch.row * qkv_dim]);
    for (const Chunk& ch : chunks) attention(li, ch, &qkv[ch.row * qkv_dim], &attn[ch.row * c.q_dim()]);
    for (const Chunk& ch : chunks)
      if (!stores_before_attention(ch)) write_kv(li, ch, &qkv[ch.row * qkv_dim]);
    emulate_w8a8(l.o_q, attn.data(), T, H, c.q_dim());
    const bool o_bias = !tp_comm_ && !l.bo.empty();  // with TP: added after the sum
    cpu::matmul(*pool_, attn.data(), l.wo.data(), o_bias ? l.bo.data() : nullptr, o.data(), T,
                c.q_dim(), H);
    tp_reduce(o.data(), T * H, l.bo);
    if (c.parallel_residual) {  // x + attn(ln1(x)) + mlp(ln2(x))
      norm(l.mlp_norm, l.mlp_norm_b, x.data(), h.data(), T);
      mlp(l, h.data(), m.data(), T);
      for (int64_t i = 0; i < T * H; ++i) x[i] += o[i] + m[i];
    } else {
      for (int64_t i = 0; i < T * H; ++i) x[i] += o[i];
      norm(l.mlp_norm, l.mlp_norm_b, x.data(), h.data(), T);
      mlp(l, h.data(), m.data(), T);
      for (int64_t i = 0; i < T * H; ++i) x[i] += m[i];
    }
  }
}

// Samples input k's token from its raw logits row [V] (a copy: sample_token edits its row, the
// log-probabilities read the raw one) into `out`.
void CpuRunner::sample_into(StepOutput& out, size_t k, std::span<const float> raw, SeqState& s,
                            std::span<const uint32_t> mask, int logprobs) {
  std::vector<float> row(raw.begin(), raw.end());
  out.sampled[k] = sample_token(row, s.sampling, s.sampler, mask);
  if (logprobs >= 0) out.logprobs[k] = compute_logprobs(raw, out.sampled[k], logprobs);
}

// Final norm and LM head for the rows anyone asked for, then sampling; returns what the
// inputs asked for (sampling-only rows are not returned).
StepOutput CpuRunner::logits_and_samples(std::span<const StepInput> inputs, const std::vector<Chunk>& chunks,
                                         const std::vector<float>& x) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  StepOutput out;
  out.sampled.assign(inputs.size(), -1);
  out.logits_row.assign(inputs.size(), -1);
  std::vector<int64_t> rows, sample_row(inputs.size(), -1);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Chunk& ch = chunks[k];
    if (inputs[k].logits == LogitsMode::kAll) {
      out.logits_row[k] = static_cast<int64_t>(rows.size());
      for (int64_t t = 0; t < ch.len; ++t) rows.push_back(ch.row + t);
    } else if (inputs[k].logits == LogitsMode::kLast || inputs[k].sample) {
      if (inputs[k].logits == LogitsMode::kLast) out.logits_row[k] = static_cast<int64_t>(rows.size());
      rows.push_back(ch.row + ch.len - 1);
    }
    if (inputs[k].sample) sample_row[k] = static_cast<int64_t>(rows.size()) - 1;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> gathered(R * H), normed(R * H), logits(R * V);
  for (int64_t r = 0; r < R; ++r) std::memcpy(&gathered[r * H], &x[rows[r] * H], H * 4);
  norm(final_norm_, final_norm_b_, gathered.data(), normed.data(), R);
  const float* head = c.tie_word_embeddings ? embed_.data() : lm_head_.data();
  const Fp8ActQuant head_q{head_fp8_, head_group_, head_static_scale_};
  emulate_w8a8(head_q, normed.data(), R, V, H, true);
  if (!tp_comm_) {
    cpu::matmul(*pool_, normed.data(), head, nullptr, logits.data(), R, H, V);
  } else {  // this rank's columns [R, padded], gathered [world][R][padded], then [R, V]
    const int64_t P = vocab_.padded, world = tp_comm_->world();
    const int64_t rows = vocab_.rows();
    std::vector<float> mine(R * rows), local(R * P, 0.0f), all(world * R * P);
    cpu::matmul(*pool_, normed.data(), head, nullptr, mine.data(), R, H, rows);
    for (int64_t r = 0; r < R; ++r) std::memcpy(&local[r * P], &mine[r * rows], rows * 4);
    tp_comm_->all_gather(tp_rank_, local.data(), local.size(), all.data());
    for (int64_t rk = 0; rk < world; ++rk) {
      const tp::VocabRange v = tp::vocab_range(V, static_cast<int>(world), static_cast<int>(rk));
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(&logits[r * V + v.begin], &all[(rk * R + r) * P], v.rows() * 4);
    }
  }

  const bool any_logprobs = std::any_of(inputs.begin(), inputs.end(),
                                        [](const StepInput& in) { return in.sample && in.logprobs >= 0; });
  if (any_logprobs) out.logprobs.resize(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    SeqState& s = seqs_.at(inputs[k].id);
    if (!s.sampler.sampled() && !s.sampler.prompt_seen.empty())
      for (int32_t tok : inputs[k].tokens) s.sampler.prompt_seen[tok] = 1;
    if (sample_row[k] < 0) continue;
    const std::span<const float> raw(&logits[sample_row[k] * V], V);
    if (inputs[k].mask_later)  // sampled by supply_masks, from the same raw row
      late_.push_back(
          {k, inputs[k].id, inputs[k].logprobs, std::vector<float>(raw.begin(), raw.end())});
    else
      sample_into(out, k, raw, s, inputs[k].mask, inputs[k].logprobs);
  }
  int64_t kept = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (out.logits_row[k] < 0) continue;
    const int64_t n = inputs[k].logits == LogitsMode::kAll ? chunks[k].len : 1;
    out.logits.insert(out.logits.end(), &logits[out.logits_row[k] * V], &logits[(out.logits_row[k] + n) * V]);
    out.logits_row[k] = kept;
    kept += n;
  }
  return out;
}

void CpuRunner::launch(std::span<const StepInput> inputs) {
  check_launch_room(static_cast<int>(finished_.size()));
  check_no_masks_due(!late_.empty(), "launch");
  // kLastSampled stands for a token the host already has here: substitute it.
  std::vector<StepInput> resolved(inputs.begin(), inputs.end());
  std::vector<int32_t> last(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const StepInput& in = inputs[k];
    if (in.tokens.size() != 1 || in.tokens[0] != kLastSampled) continue;
    const auto it = last_sampled_.find(in.id);
    if (it == last_sampled_.end()) continue;  // validate_step reports it
    last[k] = it->second;
    resolved[k].tokens = std::span<const int32_t>(&last[k], 1);
  }
  validate_step(
      inputs, config_.vocab_size, [&](SeqId id) { return seqs_.count(id) != 0; },
      [&](SeqId id) { return last_sampled_.count(id) != 0; });
  const auto t0 = std::chrono::steady_clock::now();
  StepOutput out;
  try {
    out = run(resolved);
  } catch (...) {
    late_.clear();  // a step that throws was not launched
    throw;
  }
  finished_ms_.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  last_sampled_.clear();
  for (size_t k = 0; k < inputs.size(); ++k)
    if (out.sampled[k] >= 0) last_sampled_[inputs[k].id] = out.sampled[k];
  finished_.push_back(std::move(out));
}

// The rows launched with mask_later, sampled now as launch() would have sampled them: nothing
// else of their sequences sampled in between, so their samplers are where launch() left them.
void CpuRunner::supply_masks(std::span<const LateMask> masks) {
  std::vector<SeqId> due;
  for (const LateRow& r : late_) due.push_back(r.id);
  const std::vector<size_t> rows = validate_late_masks(masks, due, config_.vocab_size);
  std::vector<std::span<const uint32_t>> mask_of(late_.size());  // empty: unconstrained
  for (size_t i = 0; i < rows.size(); ++i) mask_of[rows[i]] = masks[i].mask;
  StepOutput& out = finished_.back();
  for (size_t i = 0; i < late_.size(); ++i) {
    const LateRow& r = late_[i];
    const auto it = seqs_.find(r.id);
    if (it == seqs_.end()) continue;  // removed since launch: its slot stays -1
    sample_into(out, r.input, r.logits, it->second, mask_of[i], r.logprobs);
    last_sampled_[r.id] = out.sampled[r.input];
  }
  late_.clear();
}

StepOutput CpuRunner::finish() {
  if (finished_.empty()) throw_nothing_in_flight();
  check_no_masks_due(finished_.size() == 1 && !late_.empty(), "finish");
  StepOutput out = std::move(finished_.front());
  finished_.pop_front();
  last_step_ms_ = finished_ms_.front();
  finished_ms_.pop_front();
  return out;
}

StepOutput CpuRunner::run(std::span<const StepInput> inputs) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const auto appends = validate_step(
      inputs, c.vocab_size, [&](SeqId id) { return seqs_.count(id) != 0; },
      [](SeqId) { return false; });
  kv_->check_append(appends);
  std::vector<Chunk> chunks;
  int64_t T = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {  // after the checks: allocation cannot half-fail
    const auto [id, len] = appends[k];
    const int64_t start = kv_->append(id, inputs[k].tokens);
    chunks.push_back({id, &kv_->sequence(id), start, T, len});
    T += len;
  }
  copy_blocks(kv_->take_copies());
  std::vector<float> x(T * H);  // [T, H] residual stream; zero rows for other ranks' tokens
  for (size_t k = 0; k < chunks.size(); ++k)
    for (int64_t t = 0; t < chunks[k].len; ++t) {
      const int64_t id = static_cast<int64_t>(inputs[k].tokens[t]) - vocab_.begin;
      if (id >= 0 && id < vocab_.rows())
        std::memcpy(&x[(chunks[k].row + t) * H], &embed_[id * H], H * 4);
    }
  tp_reduce(x.data(), T * H, {});
  step_prefill_ =
      std::any_of(chunks.begin(), chunks.end(), [](const Chunk& c) { return c.len > 1; });
  forward_layers(chunks, x, T);
  return logits_and_samples(inputs, chunks, x);
}

}  // namespace rill
