#include "engine/cuda/cuda_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/step_validation.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/rope.h"
#include "rill/kernels/sampling.h"

namespace rill {

using cuda::DeviceMemory;
using cuda::PinnedMemory;
using cuda::StepPlan;

int cuda_device_count() { return cuda::cuda_device_count(); }

namespace {

constexpr int kMaxSplits = 16;
// Fewest keys a split of decode attention takes: small enough that a batch-1 step over a few
// hundred keys still spreads over all SMs (the kernel is latency-bound there), large enough that
// the merge stays cheap.
constexpr int kMinKeysPerSplit = 64;
constexpr int kOneSplitKeys = 256;    // no split up to this many keys (see attention_splits)
constexpr int kExtraLogitRows = 512;  // logits rows beyond one per sequence (kAll requests)
const int kBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

size_t esize() {
  return 2;
}  // fp16 / bf16 activations (the cache: layout_.element_bytes())

}  // namespace

// Records CUDA events around op categories of eager steps.
class CudaRunner::Profiler {
 public:
  enum Cat { kGemm, kAttention, kNorm, kSampling, kCount };
  explicit Profiler(cudaStream_t s) : stream_(s) {}
  ~Profiler() {
    for (auto& [a, b, c] : events_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  template <typename Fn>
  void time(Cat c, Fn&& fn) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream_);
    fn();
    cudaEventRecord(b, stream_);
    events_.push_back({a, b, c});
  }
  void collect(StepProfile& p) {
    for (auto& [a, b, c] : events_) {
      float ms = 0;
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms, a, b);
      (c == kGemm ? p.gemm_ms : c == kAttention ? p.attention_ms : c == kNorm ? p.norm_elementwise_ms : p.sampling_ms) += ms;
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    events_.clear();
  }

 private:
  struct Rec {
    cudaEvent_t a, b;
    Cat c;
  };
  cudaStream_t stream_;
  std::vector<Rec> events_;
};

CudaRunner::CudaRunner(const Model& model, const EngineOptions& o) : config_(model.config), options_(o) {
  graphs_enabled_ = o.cuda_graphs;
  fused_decode_ = o.fused_decode;
  const KvCacheDType kv_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);  // before any GPU work
  int dev = 0;
  RILL_CUDA(cudaGetDevice(&dev));
  RILL_CUDA(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, dev));
  RILL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const kernels::DType dtype = cuda::resolve_dtype(o.dtype, config_.stored_dtype);
  weights_ = std::make_unique<cuda::DeviceWeights>(model, dtype);
  gemm_ = std::make_unique<cuda::Gemm>(dtype, stream_);
  max_tokens_ = std::max(o.max_step_tokens, o.max_batch);
  max_batch_ = o.max_batch;
  max_rows_ = o.max_batch + kExtraLogitRows;
  if (o.block_size <= 0 || (o.block_size & (o.block_size - 1)))
    throw Error(ErrorCode::kInvalidArgument, "CUDA block size must be a power of two");
  max_blocks_ = (config_.max_position_embeddings + o.block_size - 1) / o.block_size + 1;
  layout_.num_kv_heads = config_.num_kv_heads;
  layout_.block_size = o.block_size;
  layout_.head_dim = config_.head_dim;
  if (kv_dtype == KvCacheDType::kFp8E4M3) {
    layout_.cache_dtype = kernels::KvDType::kFp8E4M3;  // scales 1, as vLLM without calibration
    layout_.k_scale = layout_.v_scale = 1.0f;
  }
  allocate_buffers();
  size_kv_pool(o.gpu_memory_fraction);
  warm_up();
  spdlog::info(
      "cuda runner: {} weights {:.1f} MiB ({}), KV pool {} blocks x {} tokens ({:.1f} MiB, {}), "
      "graphs {}",
      config_.architecture, weights_->bytes() / 1048576.0,
      dtype == kernels::DType::kF16 ? "fp16" : "bf16", layout_.num_blocks - 1, layout_.block_size,
      cache_.bytes() / 1048576.0,
      layout_.cache_dtype == kernels::KvDType::kFp8E4M3 ? "fp8 e4m3" : "model dtype",
      graphs_enabled_ ? "on" : "off");
}

CudaRunner::~CudaRunner() {
  drop_graphs();
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaRunner::drop_graphs() {
  for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
  graph_shapes_.clear();
}

void CudaRunner::set_gemv(bool on) {
  gemm_->set_gemv_enabled(on);
  drop_graphs();
}

namespace {
void check_gemv_config(int config) {
  if (config < -1 || config >= kernels::gemv_num_configs())
    throw Error(ErrorCode::kInvalidArgument,
                "GEMV config: -1 (default) .. " + std::to_string(kernels::gemv_num_configs() - 1));
}
}  // namespace

void CudaRunner::set_gemv_config(int config) {
  check_gemv_config(config);
  gemm_->set_gemv_config(config);
  drop_graphs();
}

void CudaRunner::set_gemv_deep_prologue(int mask) {
  if (mask < 0 || mask > kDeepAll)
    throw Error(ErrorCode::kInvalidArgument,
                "GEMV deep-prologue mask: 0 .. " + std::to_string(kDeepAll));
  gemv_deep_mask_ = mask;
  drop_graphs();
}

void CudaRunner::set_gemv_deep_config(int config) {
  check_gemv_config(config);
  gemm_->set_deep_config(config);
  drop_graphs();
}

void CudaRunner::set_early_kv_loads(bool on) {
  early_kv_loads_ = on;
  drop_graphs();
}

void CudaRunner::set_cluster_merge(bool on) {
  cluster_merge_ = on;
  drop_graphs();
}

void CudaRunner::set_decode_splits(int splits) {
  if (splits < 0 || splits > kMaxSplits)
    throw Error(ErrorCode::kInvalidArgument,
                "decode splits: 0 (automatic) .. " + std::to_string(kMaxSplits));
  forced_splits_ = splits;
  drop_graphs();
}

void CudaRunner::set_fused_decode(bool on) {
  fused_decode_ = on;
  drop_graphs();
}

void CudaRunner::set_programmatic_launch(bool on) {
  kernels::set_programmatic_launch(on);
  drop_graphs();
}

void CudaRunner::allocate_buffers() {
  const ModelConfig& c = config_;
  const size_t T = max_tokens_, H = c.hidden_size, R = max_rows_, V = c.vocab_size;
  const size_t up_width = c.gated_mlp ? 2 * size_t(c.intermediate_size) : c.intermediate_size;
  x_ = DeviceMemory(T * H * 4, "residual stream");
  h_ = DeviceMemory(T * H * esize(), "activations");
  if (c.parallel_residual) h2_ = DeviceMemory(T * H * esize(), "activations");
  qkv_ = DeviceMemory(T * c.qkv_dim() * esize(), "activations");
  q_sink_ = DeviceMemory(T * c.q_dim() * esize(), "activations");
  attn_ = DeviceMemory(T * c.q_dim() * esize(), "activations");
  o_ = DeviceMemory(T * H * esize(), "activations");
  up_ = DeviceMemory(T * up_width * esize(), "activations");
  act_ = DeviceMemory(T * c.intermediate_size * esize(), "activations");
  m_ = DeviceMemory(T * H * esize(), "activations");
  normed_ = DeviceMemory(R * H * esize(), "activations");
  logits_ = DeviceMemory(R * V * 4, "logits");
  sampled_ = DeviceMemory(R * 4, "sampled tokens");
  attn_ws_ = DeviceMemory(kernels::decode_attention_workspace_bytes(max_batch_, c.num_heads, c.head_dim, kMaxSplits),
                          "attention workspace");
  // The split merge's counters must start at zero; every launch leaves them zero again.
  if (attn_ws_.bytes() > 0) RILL_CUDA(cudaMemsetAsync(attn_ws_.get(), 0, attn_ws_.bytes(), stream_));
  output_counts_ = DeviceMemory(size_t(max_batch_) * V * 4, "penalty state");
  prompt_mask_ = DeviceMemory(size_t(max_batch_) * V, "penalty state");
  for (int s = max_batch_ - 1; s >= 0; --s) free_state_slots_.push_back(s);
  const cuda::StepShape biggest{max_tokens_, max_batch_, max_batch_, max_rows_, max_rows_, max_blocks_};
  const size_t meta_bytes = cuda::StepLayout::make(biggest).bytes;
  meta_dev_ = DeviceMemory(meta_bytes, "step metadata");
  meta_host_ = PinnedMemory(meta_bytes, "step metadata");
  logits_host_ = PinnedMemory(R * V * 4, "logits");
  sampled_host_ = PinnedMemory(R * 4, "sampled tokens");
}

void CudaRunner::size_kv_pool(double fraction) {
  size_t free_b = 0, total_b = 0;
  RILL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double keep = (1.0 - fraction) * double(total_b) + 512.0 * (1 << 20);  // graphs, cuBLAS, fragmentation
  const double budget = double(free_b) - keep;
  // In bytes: an fp8 cache holds twice the tokens of a 16-bit one in the same memory.
  const size_t block_bytes =
      size_t(layout_.block_stride()) * layout_.element_bytes() * config_.num_layers;
  const long long blocks = budget > 0 ? static_cast<long long>(budget / double(block_bytes)) : 0;
  if (blocks < max_blocks_ + 1)
    throw Error(ErrorCode::kResourceExhausted,
                "not enough GPU memory for the KV cache: " + std::to_string(std::max(0.0, budget) / 1048576.0) +
                    " MiB left after the weights, one sequence needs " +
                    std::to_string(double(block_bytes) * max_blocks_ / 1048576.0) + " MiB");
  const int usable = static_cast<int>(std::min<long long>(blocks - 1, INT32_MAX / layout_.block_size - 1));
  layout_.num_blocks = usable + 1;  // the last block is a trash target for padded graph rows
  trash_block_ = usable;
  cache_ = DeviceMemory(size_t(layout_.num_blocks) * block_bytes, "KV cache");
  kv_ = std::make_unique<KvCacheManager>(usable, layout_.block_size, config_.max_position_embeddings,
                                         config_.sliding_window);
}

// One real step on a scratch sequence: surfaces unsupported shapes at load, not at first request.
void CudaRunner::warm_up() {
  const SeqId id = INT64_MIN;
  add_sequence({id, CachePolicy::full(), {}});
  const int32_t tokens[2] = {0, 0};
  StepInput prefill{id, std::span<const int32_t>(tokens, 2), LogitsMode::kNone, true};
  step(std::span<const StepInput>(&prefill, 1));
  StepInput decode{id, std::span<const int32_t>(tokens, 1), LogitsMode::kNone, true};
  step(std::span<const StepInput>(&decode, 1));
  remove_sequence(id);
}

int CudaRunner::decode_bucket(int batch) const {
  if (!graphs_enabled_) return 0;
  for (int b : kBuckets)
    if (b >= batch && b <= max_batch_) return b;
  return 0;
}

int CudaRunner::attention_splits(int decode_seqs, int max_keys) const {
  if (forced_splits_ > 0) return forced_splits_;
  // Measured on H100 at batch 1 (docs/performance.md): up to ~256 keys one CTA per kv head beats
  // any split (the merge costs more than it saves); beyond, about one split per 64 keys, as many
  // CTAs as fit four per SM, rounded down to a power of two so that a sequence growing from 256
  // to 65k keys needs at most 5 graphs per batch bucket.
  if (max_keys <= kOneSplitKeys) return 1;
  const int ctas = std::max(1, decode_seqs * config_.num_kv_heads);
  const int want = std::min(
      {(max_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit, 4 * num_sms_ / ctas, kMaxSplits});
  int splits = 1;
  while (splits * 2 <= want) splits *= 2;
  return splits;
}

void CudaRunner::add_sequence(const SequenceSpec& spec) {
  spec.sampling.validate();
  if (seqs_.count(spec.id)) throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(spec.id) + " exists");
  SeqInfo info;
  info.sampling.params = spec.sampling;
  if (spec.sampling.has_penalties()) {
    if (free_state_slots_.empty()) throw Error(ErrorCode::kResourceExhausted, "too many sequences with penalties");
    info.sampling.state_slot = free_state_slots_.back();
    const size_t V = config_.vocab_size;
    RILL_CUDA(cudaMemsetAsync(output_counts_.as<int32_t>() + info.sampling.state_slot * V, 0, V * 4, stream_));
    RILL_CUDA(cudaMemsetAsync(prompt_mask_.as<uint8_t>() + info.sampling.state_slot * V, 0, V, stream_));
  }
  kv_->add_sequence(spec.id, spec.cache);  // validates the policy
  if (info.sampling.state_slot >= 0) free_state_slots_.pop_back();
  seqs_.emplace(spec.id, info);
}

void CudaRunner::remove_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (it->second.sampling.state_slot >= 0) free_state_slots_.push_back(it->second.sampling.state_slot);
  seqs_.erase(it);
  kv_->remove_sequence(id);
}

void CudaRunner::profile_snapshot_and_stop() { profiler_.reset(); }

void CudaRunner::set_profiling(bool on) {
  profiler_ = on ? std::make_unique<Profiler>(stream_) : nullptr;
  profile_ = {};
}

template <typename Fn>
void CudaRunner::timed(int category, Fn&& fn) {
  if (profiler_) {
    profiler_->time(static_cast<Profiler::Cat>(category), fn);
  } else {
    fn();
  }
}

// Decode rows' attention over the paged cache (split count from the step's longest key range).
void CudaRunner::enqueue_decode_attention(const StepPlan& plan, const void* layer_cache,
                                          float scale) {
  const ModelConfig& c = config_;
  const cuda::StepShape& sh = plan.shape;
  kernels::DecodeAttentionParams p;
  p.dtype = weights_->dtype();
  p.num_seqs = sh.decode;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.scale = scale;
  p.q = qkv_.get();
  p.q_stride = c.qkv_dim();
  p.q_sink = q_sink_.get();
  p.q_sink_stride = c.q_dim();
  p.seqs = reinterpret_cast<const kernels::DecodeSeq*>(dmeta() + plan.layout.decode);
  p.cache = layer_cache;
  p.layout = layout_;
  p.out = attn_.get();
  p.num_splits = attention_splits(sh.decode, plan.max_decode_keys);
  p.min_keys_per_split = kMinKeysPerSplit;
  p.early_kv_loads = early_kv_loads_;
  p.cluster_merge = cluster_merge_;
  p.workspace = attn_ws_.get();
  RILL_CUDA(kernels::launch_decode_attention(p, stream_));
}

// QKV projection, RoPE + KV write, attention over the cache (and the fresh chunk), prefill K/V
// write, output projection: h_ (normed input) -> o_.
void CudaRunner::enqueue_attention(int li, const StepPlan& plan) {
  const ModelConfig& c = config_;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  const cuda::StepShape& sh = plan.shape;
  const cuda::StepLayout& L = plan.layout;
  const kernels::DType dt = weights_->dtype();
  const int T = sh.tokens, H = c.hidden_size;
  char* layer_cache =
      cache_.as<char>() + size_t(li) * layout_.layer_stride() * layout_.element_bytes();

  timed(Profiler::kGemm, [&] {
    gemm_->run(h_.get(), w.wqkv, qkv_.get(), T, c.qkv_dim(), H, false, deep_gemv(kDeepQkv));
  });
  timed(Profiler::kNorm, [&] {
    kernels::RopeKvParams p;
    p.dtype = dt;
    p.num_tokens = T;
    p.num_heads = c.num_heads;
    p.num_kv_heads = c.num_kv_heads;
    p.head_dim = c.head_dim;
    p.rotary_dim = c.rope.rotary_dim;
    p.qkv = qkv_.get();
    p.qkv_stride = c.qkv_dim();
    p.qkv_bias = w.bqkv;
    p.q_sink = q_sink_.get();
    p.positions = reinterpret_cast<const int64_t*>(dmeta() + L.positions);
    p.sink_positions = reinterpret_cast<const int64_t*>(dmeta() + L.sink_positions);
    p.inv_freq = weights_->inv_freq();
    p.cache_slot = reinterpret_cast<const int32_t*>(dmeta() + L.rope_slot);
    p.cache = layer_cache;
    p.layout = layout_;
    RILL_CUDA(kernels::launch_rope_kv(p, stream_));
  });
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  timed(Profiler::kAttention, [&] {
    if (sh.decode > 0) enqueue_decode_attention(plan, layer_cache, scale);
    if (sh.prefill > 0) {
      kernels::PrefillAttentionParams p;
      p.dtype = dt;
      p.num_seqs = sh.prefill;
      p.num_heads = c.num_heads;
      p.num_kv_heads = c.num_kv_heads;
      p.head_dim = c.head_dim;
      p.scale = scale;
      p.qkv = qkv_.get();
      p.qkv_stride = c.qkv_dim();
      p.q_sink = q_sink_.get();
      p.seqs = reinterpret_cast<const kernels::PrefillSeq*>(dmeta() + L.prefill);
      p.cache = layer_cache;
      p.layout = layout_;
      p.out = attn_.get();
      p.max_tokens = plan.max_prefill_tokens;
      RILL_CUDA(kernels::launch_prefill_attention(p, stream_));
    }
  });
  if (sh.prefill > 0) {
    timed(Profiler::kNorm, [&] {  // prefill chunks store their K/V after attending to the old cache
      kernels::KvWriteParams p;
      p.dtype = dt;
      p.num_tokens = T;
      p.num_heads = c.num_heads;
      p.num_kv_heads = c.num_kv_heads;
      p.head_dim = c.head_dim;
      p.qkv = qkv_.get();
      p.qkv_stride = c.qkv_dim();
      p.cache_slot = reinterpret_cast<const int32_t*>(dmeta() + L.late_slot);
      p.cache = layer_cache;
      p.layout = layout_;
      RILL_CUDA(kernels::launch_kv_write(p, stream_));
    });
  }
  timed(Profiler::kGemm, [&] {
    gemm_->run(attn_.get(), w.wo, o_.get(), T, H, c.q_dim(), false, deep_gemv(kDeepO));
  });
}

// Up (or gate | up) projection, activation, down projection: in -> m_.
void CudaRunner::enqueue_mlp(int li, const void* in, int T) {
  const ModelConfig& c = config_;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  const int H = c.hidden_size, I = c.intermediate_size;
  // Decode: SiLU-and-mul in the GEMV's epilogue (gate and up rows interleaved at load).
  const bool silu_in_gemv = fused_decode_ && c.gated_mlp && weights_->gate_up_interleaved() &&
                            gemm_->uses_gemv(in, w.wup, T, H);
  timed(Profiler::kGemm, [&] {
    if (!silu_in_gemv) {
      gemm_->run(in, w.wup, up_.get(), T, c.gated_mlp ? 2 * I : I, H, false, deep_gemv(kDeepUp));
      return;
    }
    kernels::GemvParams p;
    p.M = T;
    p.N = 2 * I;
    p.K = H;
    p.x = in;
    p.w = w.wup;
    p.y = act_.get();
    p.epilogue = kernels::GemvEpilogue::kSiluMul;
    p.bias = w.bup;
    p.deep_prologue = deep_gemv(kDeepUp);
    gemm_->gemv(p);
  });
  if (!silu_in_gemv) timed(Profiler::kNorm, [&] {
    kernels::ActivationParams p;
    p.dtype = weights_->dtype();
    p.kind = c.gated_mlp ? kernels::ActKind::kSiluMul
                         : (c.act == Activation::kGeluTanh ? kernels::ActKind::kGeluTanh
                                                           : kernels::ActKind::kGeluErf);
    if (c.gated_mlp && c.act != Activation::kSilu)
      throw Error(ErrorCode::kUnsupported, "gated MLP with a non-SiLU activation");
    p.num_tokens = T;
    p.width = I;
    p.in = up_.get();
    p.bias = w.bup;
    p.out = act_.get();
    p.interleaved = c.gated_mlp && weights_->gate_up_interleaved();
    RILL_CUDA(kernels::launch_activation(p, stream_));
  });
  timed(Profiler::kGemm,
        [&] { gemm_->run(act_.get(), w.wdown, m_.get(), T, H, I, false, deep_gemv(kDeepDown)); });
}

void CudaRunner::enqueue_add_norm(kernels::AddNormParams p, const StepPlan& plan, bool gather) {
  const ModelConfig& c = config_;
  p.dtype = weights_->dtype();
  p.type = c.norm == NormKind::kRmsNorm ? kernels::NormType::kRms : kernels::NormType::kLayer;
  p.eps = c.norm_eps;
  p.num_tokens = gather ? plan.shape.logit_rows : plan.shape.tokens;
  p.hidden = c.hidden_size;
  p.residual = x_.as<float>();
  p.rows = gather ? reinterpret_cast<const int32_t*>(dmeta() + plan.layout.rows) : nullptr;
  timed(Profiler::kNorm, [&] { RILL_CUDA(kernels::launch_add_norm(p, stream_)); });
}

// One decoder layer over the step's token matrix. On entry h_ (and h2_) hold the normed input;
// each residual add is fused with the norm that follows it (the next sub-layer's, or the final
// norm after the last layer, on the logit rows only).
void CudaRunner::enqueue_layer(int li, const StepPlan& plan) {
  const ModelConfig& c = config_;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  const int T = plan.shape.tokens;
  const bool last = li + 1 == c.num_layers;
  const cuda::DeviceLayer* next = last ? nullptr : &weights_->layers()[li + 1];
  // The norm after this layer: the next layer's attention norm (and, parallel residual, its
  // MLP norm into h2_), or the final norm.
  kernels::AddNormParams after;
  if (last) {
    after.weight0 = weights_->final_norm();
    after.norm_bias0 = weights_->final_norm_bias();
    after.out0 = normed_.get();
  } else {
    after.weight0 = next->attn_norm;
    after.norm_bias0 = next->attn_norm_bias;
    after.out0 = h_.get();
    if (c.parallel_residual) {
      after.weight1 = next->mlp_norm;
      after.norm_bias1 = next->mlp_norm_bias;
      after.out1 = h2_.get();
    }
  }

  enqueue_attention(li, plan);
  if (c.parallel_residual) {  // x + attn(ln1(x)) + mlp(ln2(x)): h2_ holds ln2(x)
    enqueue_mlp(li, h2_.get(), T);
    after.delta0 = o_.get();
    after.bias0 = w.bo;
    after.delta1 = m_.get();
    after.bias1 = w.bdown;
    enqueue_add_norm(after, plan, last);
    return;
  }
  kernels::AddNormParams mid;
  mid.delta0 = o_.get();
  mid.bias0 = w.bo;
  mid.weight0 = w.mlp_norm;
  mid.norm_bias0 = w.mlp_norm_bias;
  mid.out0 = h_.get();
  enqueue_add_norm(mid, plan, false);
  enqueue_mlp(li, h_.get(), T);
  after.delta0 = m_.get();
  after.bias0 = w.bdown;
  enqueue_add_norm(after, plan, last);
}

// The whole step: embedding, layers, final norm on the logit rows, LM head, sampling.
void CudaRunner::enqueue_forward(const StepPlan& plan, bool copy_logits) {
  const ModelConfig& c = config_;
  const cuda::StepShape& sh = plan.shape;
  const cuda::StepLayout& L = plan.layout;
  const kernels::DType dt = weights_->dtype();
  timed(Profiler::kNorm, [&] {
    kernels::EmbeddingParams e;
    e.dtype = dt;
    e.num_tokens = sh.tokens;
    e.hidden = c.hidden_size;
    e.vocab = c.vocab_size;
    e.table = weights_->embed();
    e.tokens = reinterpret_cast<const int32_t*>(dmeta() + L.tokens);
    e.out = x_.as<float>();
    RILL_CUDA(kernels::launch_embedding(e, stream_));
  });
  const cuda::DeviceLayer& l0 = weights_->layers()[0];
  kernels::AddNormParams first;  // the first layer's norm(s) of the embeddings
  first.weight0 = l0.attn_norm;
  first.norm_bias0 = l0.attn_norm_bias;
  first.out0 = h_.get();
  if (c.parallel_residual) {
    first.weight1 = l0.mlp_norm;
    first.norm_bias1 = l0.mlp_norm_bias;
    first.out1 = h2_.get();
  }
  enqueue_add_norm(first, plan, false);
  for (int li = 0; li < c.num_layers; ++li) enqueue_layer(li, plan);
  if (sh.logit_rows == 0) return;
  timed(Profiler::kGemm, [&] {
    gemm_->run(normed_.get(), weights_->lm_head(), logits_.get(), sh.logit_rows, c.vocab_size,
               c.hidden_size, true, deep_gemv(kDeepHead));
  });
  if (copy_logits)  // before sampling, which edits the logits in place
    RILL_CUDA(cudaMemcpyAsync(logits_host_.get(), logits_.get(), size_t(sh.logit_rows) * c.vocab_size * 4,
                              cudaMemcpyDeviceToHost, stream_));
  if (sh.sampled == 0) return;
  timed(Profiler::kSampling, [&] {
    kernels::SampleParams s;
    s.num_rows = sh.sampled;
    s.vocab = c.vocab_size;
    s.logits = logits_.as<float>();
    s.rows = reinterpret_cast<const kernels::SamplingRow*>(dmeta() + L.sampling);
    s.output_counts = output_counts_.as<int32_t>();
    s.prompt_mask = prompt_mask_.as<uint8_t>();
    s.out_tokens = sampled_.as<int32_t>();
    RILL_CUDA(kernels::launch_sample(s, stream_));
  });
}

cudaGraphExec_t CudaRunner::graph_for(int bucket, const StepPlan& plan) {
  // One graph per batch bucket and attention split count (the grid of decode attention).
  const int key =
      bucket * (kMaxSplits + 1) + attention_splits(plan.shape.decode, plan.max_decode_keys);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    if (!(graph_shapes_.at(key) == plan.shape))
      throw Error(ErrorCode::kInternal, "graph shape changed");
    return it->second;
  }
  cudaGraph_t graph;
  RILL_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_forward(plan, false);
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  RILL_CUDA(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec;
  RILL_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  RILL_CUDA(cudaGraphDestroy(graph));
  graphs_[key] = exec;
  graph_shapes_[key] = plan.shape;
  return exec;
}

StepOutput CudaRunner::step(std::span<const StepInput> inputs) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(inputs.size());
  if (n == 0) return {};
  // Validate everything before touching any state.
  const auto appends = validate_step(inputs, c.vocab_size, [&](SeqId id) { return seqs_.count(id) != 0; });
  int total = 0, decode = 0, extra_rows = 0;
  bool any_logits = false;
  for (const StepInput& in : inputs) {
    total += static_cast<int>(in.tokens.size());
    decode += in.tokens.size() == 1;
    if (in.logits == LogitsMode::kAll) extra_rows += static_cast<int>(in.tokens.size());
    if (in.logits != LogitsMode::kNone) any_logits = true;
  }
  if (n > max_batch_) throw Error(ErrorCode::kInvalidArgument, "step has more sequences than max_batch");
  if (total > max_tokens_)
    throw Error(ErrorCode::kInvalidArgument, "step has " + std::to_string(total) + " tokens, more than the " +
                                                 std::to_string(max_tokens_) + " the runner was sized for");
  if (extra_rows + n > max_rows_)
    throw Error(ErrorCode::kInvalidArgument, "too many logits rows in one step (at most " +
                                                 std::to_string(max_rows_ - max_batch_) + " for LogitsMode::kAll)");
  kv_->check_append(appends);
  std::vector<int64_t> starts(n);
  std::vector<const cuda::SamplingSlot*> sampling(n);
  for (int k = 0; k < n; ++k) {
    starts[k] = kv_->append(inputs[k].id, static_cast<int64_t>(inputs[k].tokens.size()));
    sampling[k] = &seqs_.at(inputs[k].id).sampling;
  }
  const int bucket = (decode == n && !any_logits && !profiler_) ? decode_bucket(n) : 0;
  const StepPlan plan = cuda::plan_step(inputs, starts, *kv_, max_blocks_, bucket, trash_block_, sampling,
                                        meta_host_.as<char>(), dmeta());
  if (step_timing_) RILL_CUDA(cudaEventRecord(step_begin_.get(), stream_));
  RILL_CUDA(cudaMemcpyAsync(meta_dev_.get(), meta_host_.get(), plan.layout.bytes, cudaMemcpyHostToDevice, stream_));
  // Penalised sequences still in their prompt: remember the prompt tokens on the GPU.
  for (int k = 0; k < n; ++k) {
    const cuda::SamplingSlot& s = *sampling[k];
    if (s.state_slot < 0 || s.step > 0 || s.params.repetition_penalty == 1.0f) continue;
    const int32_t* toks = reinterpret_cast<const int32_t*>(dmeta() + plan.layout.tokens) + plan.input_first_row[k];
    RILL_CUDA(kernels::launch_mark_prompt(prompt_mask_.as<uint8_t>(), c.vocab_size, s.state_slot, toks,
                                          static_cast<int>(inputs[k].tokens.size()), stream_));
  }
  if (bucket > 0) {
    RILL_CUDA(cudaGraphLaunch(graph_for(bucket, plan), stream_));
  } else {
    enqueue_forward(plan, plan.any_logits);
  }
  if (plan.shape.sampled > 0)
    RILL_CUDA(cudaMemcpyAsync(sampled_host_.get(), sampled_.get(), size_t(plan.shape.sampled) * 4,
                              cudaMemcpyDeviceToHost, stream_));
  if (step_timing_) RILL_CUDA(cudaEventRecord(step_end_.get(), stream_));
  RILL_CUDA(cudaStreamSynchronize(stream_));
  if (step_timing_) {
    float ms = 0;
    RILL_CUDA(cudaEventElapsedTime(&ms, step_begin_.get(), step_end_.get()));
    last_step_gpu_ms_ = ms;
  }
  if (profiler_) {
    profiler_->collect(profile_);
    ++profile_.steps;
  }

  StepOutput out;
  out.sampled.assign(n, -1);
  out.logits_row.assign(n, -1);
  const int32_t* sampled = sampled_host_.as<int32_t>();
  const float* logits = logits_host_.as<float>();
  int64_t kept = 0;
  for (int k = 0; k < n; ++k) {
    if (plan.sampled_index[k] >= 0 && inputs[k].sample) {
      out.sampled[k] = sampled[plan.sampled_index[k]];
      ++seqs_.at(inputs[k].id).sampling.step;
    }
    if (plan.logits_first[k] >= 0) {
      const size_t V = c.vocab_size;
      out.logits.insert(out.logits.end(), logits + size_t(plan.logits_first[k]) * V,
                        logits + size_t(plan.logits_first[k] + plan.logits_count[k]) * V);
      out.logits_row[k] = kept;
      kept += plan.logits_count[k];
    }
  }
  return out;
}

}  // namespace rill
