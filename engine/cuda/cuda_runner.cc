#include "engine/cuda/cuda_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/cuda/cuda_support.h"
#include "engine/cuda/step_profiler.h"
#include "engine/error.h"
#include "engine/model/dtype.h"
#include "engine/runner/cache_identity.h"
#include "engine/runner/step_validation.h"
#include "engine/tp/host_collective.h"
#include "engine/tp/tp_stage.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"
#include "rill/kernels/logprobs.h"
#include "rill/kernels/rope.h"
#include "rill/kernels/sampling.h"

namespace rill {

using cuda::DeviceMemory;
using cuda::PinnedMemory;
using cuda::StepPlan;

int cuda_device_count() { return cuda::cuda_device_count(); }

namespace {

static_assert(kMaxTopLogprobs <= kernels::kLogprobsMaxTop);

constexpr int kExtraLogitRows = 512;  // logits rows beyond one per sequence (kAll requests)
const int kBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

size_t esize() {
  return 2;
}  // fp16 / bf16 activations (the cache: layout_.element_bytes())

// Names a tensor-parallel rank's stage (the group's watchdog and RILL_TP_TRACE).
void tp_stage(const CudaTpRank& tp, const char* what) {
  if (tp.comm) tp::set_stage(what);
}

}  // namespace

CudaRunner::CudaRunner(const Model& model, const EngineOptions& o)
    : CudaRunner(model, o, CudaTpRank{}) {}

CudaRunner::CudaRunner(const Model& model, const EngineOptions& o, CudaTpRank tp)
    : config_(model.config), options_(o), tp_(std::move(tp)) {
  vocab_ = tp::vocab_range(config_.vocab_size, tp_.comm ? tp_.comm->world() : 1,
                           tp_.comm ? tp_.comm->rank() : 0);
  // Everything that can be refused is checked before any GPU work: options, the model's shapes
  // against what the kernels take, the tuning.
  const KvCacheDType kv_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  if (o.block_size <= 0 || (o.block_size & (o.block_size - 1)))
    throw Error(ErrorCode::kInvalidArgument, "CUDA block size must be a power of two");
  const WeightQuant quant = resolve_quantization(o.quantization, config_.quant);
  if (const auto why = cuda_unsupported_reason(
          config_, cuda_compute_dtype(o.dtype, config_.stored_dtype), kv_dtype, quant))
    throw Error(ErrorCode::kUnsupported, "the CUDA runner cannot run this model: " + *why);
  check_tuning(o.cuda_tuning);
  tuning_ = o.cuda_tuning;
  int dev = 0;
  RILL_CUDA(cudaGetDevice(&dev));
  RILL_CUDA(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, dev));
  // The ranks of a group choose the same decode graphs (attention_splits reads num_sms_).
  if (tp_.host) num_sms_ = static_cast<int>(tp_.host->min(tp_.comm->rank(), num_sms_));
  tp_stage(tp_, "loading the weights");
  RILL_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  RILL_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  const kernels::DType dtype = cuda::resolve_dtype(o.dtype, config_.stored_dtype);
  weights_ = std::make_unique<cuda::DeviceWeights>(model, dtype, quant);
  gemm_ = std::make_unique<cuda::Gemm>(dtype, stream_);
  max_tokens_ = std::max(o.max_step_tokens, o.max_batch);
  for (const cuda::DeviceLayer& l : weights_->layers())
    for (const cuda::DeviceLinear* w : {&l.wqkv, &l.wo, &l.wup, &l.wdown})
      if (w->fp8() && w->scale_layout == kernels::Fp8ScaleLayout::kBlock128)
        row_bucket_ = kFp8BlockGemmRowBucket;
  gemm_rows_cap_ = (max_tokens_ + row_bucket_ - 1) / row_bucket_ * row_bucket_;
  max_batch_ = o.max_batch;
  max_rows_ = o.max_batch + kExtraLogitRows;
  if (quant == WeightQuant::kFp8)  // the W8A8 GEMMs' quantized activations (LM head rows too)
    gemm_->reserve_fp8(std::max(gemm_rows_cap_, max_rows_),
                       std::max({config_.hidden_size, config_.q_dim(), config_.intermediate_size}));
  max_blocks_ = (config_.max_position_embeddings + o.block_size - 1) / o.block_size + 1;
  layout_.num_kv_heads = config_.num_kv_heads;
  layout_.block_size = o.block_size;
  layout_.head_dim = config_.head_dim;
  if (kv_dtype == KvCacheDType::kFp8E4M3) {
    // Scales 1, as vLLM without calibration; each layer's calibrated ones where the checkpoint
    // has them (DeviceLayer::kv_scales, set per layer in enqueue_attention).
    layout_.cache_dtype = kernels::KvDType::kFp8E4M3;
    layout_.k_scale = layout_.v_scale = 1.0f;
  }
  rope_fusable_ = kernels::decode_rope_supported(config_.head_dim, config_.rope.rotary_dim,
                                                 layout_.cache_dtype);
  cache_identity_ =
      kv_cache_identity(model, "cuda", dtype == kernels::DType::kF16 ? "float16" : "bfloat16",
                        kv_dtype == KvCacheDType::kFp8E4M3 ? "fp8_e4m3" : "compute");
  apply_tuning();
  tp_stage(tp_, "allocating buffers");
  allocate_buffers();
  tp_stage(tp_, "sizing the KV pool");
  size_kv_pool(o.gpu_memory_fraction);
  tp_stage(tp_, "allocating host KV memory");
  allocate_host_kv(o.host_kv_cache_bytes);
  if (tp_.peers) {  // every rank's o and down outputs, for the fused all-reduce
    tp_stage(tp_, "exchanging peer buffers");
    const int rank = tp_.comm->rank();
    peer_o_ = tp_.peers->params(rank, tp_.host->exchange(rank, o_.get()));
    peer_m_ = tp_.peers->params(rank, tp_.host->exchange(rank, m_.get()));
  }
  tp_stage(tp_, "meeting the GEMM shapes");
  warm_up_gemms();  // cuBLAS allocates its workspace here too
  // No rank's first collective before every rank's last allocation: an allocation can wait for
  // its device while the other rank's collective spins on it waiting for this one.
  if (tp_.host) {
    tp_stage(tp_, "waiting for the other ranks' allocations");
    tp_.host->barrier();
  }
  tp_stage(tp_, "warm-up steps");
  warm_up();
  if (tuning_.cuda_graphs && tuning_.precapture_graphs) precapture_graphs();
  spdlog::info(
      "cuda runner: {} weights {:.1f} MiB ({}, linear layers: {}), KV pool {} blocks x {} tokens "
      "({:.1f} MiB, {}), graphs {}",
      config_.architecture, weights_->bytes() / 1048576.0,
      dtype == kernels::DType::kF16 ? "fp16" : "bf16", describe_quantization(quant, config_.quant),
      layout_.num_blocks - 1, layout_.block_size, cache_.bytes() / 1048576.0,
      layout_.cache_dtype == kernels::KvDType::kFp8E4M3 ? "fp8 e4m3" : "model dtype",
      tuning_.cuda_graphs ? "on" : "off");
}

CudaRunner::~CudaRunner() {
  drop_graphs();
  for (PendingTransfer& t : transfers_) {
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  for (auto& [id, r] : restoring_) cudaEventDestroy(r.done);
  for (Offloading& o : offloading_) cudaEventDestroy(o.done);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaRunner::drop_graphs() {
  for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
  graphs_.clear();
  graph_shapes_.clear();
}

namespace {
void check_gemv_config(int config, const std::string& what) {
  if (config < -1 || config >= kernels::gemv_num_configs())
    throw Error(ErrorCode::kInvalidArgument, what + ": -1 (default) .. " +
                                                 std::to_string(kernels::gemv_num_configs() - 1) +
                                                 ", got " + std::to_string(config));
}
}  // namespace

void CudaRunner::check_tuning(const CudaTuning& t) {
  check_gemv_config(t.gemv_config, "GEMV config");
  check_gemv_config(t.gemv_deep_config, "GEMV deep-prologue config");
  for (int config : t.projection_gemv_config) check_gemv_config(config, "projection GEMV config");
  if (t.gemv_deep_mask < 0 || t.gemv_deep_mask > CudaTuning::kAllProjections)
    throw Error(ErrorCode::kInvalidArgument,
                "GEMV deep-prologue mask: 0 .. " + std::to_string(CudaTuning::kAllProjections));
  if (t.peer_sum_max_tokens < 0 || t.peer_sum_max_tokens > 16384)
    throw Error(ErrorCode::kInvalidArgument, "peer-sum tokens: 0 .. 16384");
  if (t.fp8_gemv_max_rows < 0 || t.fp8_gemv_max_rows > kernels::kFp8GemvMaxRows)
    throw Error(ErrorCode::kInvalidArgument,
                "fp8 GEMV rows: 0 .. " + std::to_string(kernels::kFp8GemvMaxRows));
  if (t.fp8_gemv_config < -1 || t.fp8_gemv_config >= kernels::gemv_fp8_num_configs())
    throw Error(
        ErrorCode::kInvalidArgument,
        "fp8 GEMV config: -1 (default) .. " + std::to_string(kernels::gemv_fp8_num_configs() - 1));
  if (t.fp8_gemv_deep_mask < -1 || t.fp8_gemv_deep_mask > CudaTuning::kAllProjections)
    throw Error(ErrorCode::kInvalidArgument,
                "fp8 GEMV deep-prologue mask: -1 (default) .. " +
                    std::to_string(CudaTuning::kAllProjections));
  if (t.fp8_gemv_deep_config < -1 || t.fp8_gemv_deep_config >= kernels::gemv_fp8_num_configs())
    throw Error(ErrorCode::kInvalidArgument,
                "fp8 GEMV deep-prologue config: -1 (default) .. " +
                    std::to_string(kernels::gemv_fp8_num_configs() - 1));
  for (int c : t.fp8_projection_gemv_config)
    if (c < -1 || c >= kernels::gemv_fp8_num_configs())
      throw Error(ErrorCode::kInvalidArgument,
                  "fp8 GEMV projection config: -1 (default) .. " +
                      std::to_string(kernels::gemv_fp8_num_configs() - 1));
  if (t.decode_split_ctas_per_sm < 1 || t.decode_split_ctas_per_sm > 8)
    throw Error(ErrorCode::kInvalidArgument, "decode split cap: 1 .. 8 CTAs an SM");
  if (t.decode_splits < 0 || t.decode_splits > kMaxSplits)
    throw Error(ErrorCode::kInvalidArgument,
                "decode splits: 0 (automatic) .. " + std::to_string(kMaxSplits));
}

void CudaRunner::apply_tuning() {
  gemm_->set_gemv_enabled(tuning_.gemv);
  gemm_->set_gemv_config(tuning_.gemv_config);
  gemm_->set_deep_config(tuning_.gemv_deep_config);
  gemm_->set_fp8_gemv_max_rows(tuning_.fp8_gemv_max_rows);
  gemm_->set_fp8_fast_accum(tuning_.fp8_fast_accum);
  gemm_->set_fp8_gemv_config(tuning_.fp8_gemv_config);
  gemm_->set_fp8_deep_config(tuning_.fp8_gemv_deep_config);
  kernels::set_programmatic_launch(tuning_.programmatic_launch);
}

void CudaRunner::set_tuning(const CudaTuning& t) {
  check_tuning(t);
  tuning_ = t;
  apply_tuning();
  drop_graphs();
  if (tuning_.cuda_graphs && tuning_.precapture_graphs) precapture_graphs();
}

void CudaRunner::allocate_buffers() {
  const ModelConfig& c = config_;
  const size_t T = max_tokens_, H = c.hidden_size, R = max_rows_, V = c.vocab_size;
  const size_t up_width = c.gated_mlp ? 2 * size_t(c.intermediate_size) : c.intermediate_size;
  const size_t G = gemm_rows_cap_;  // the GEMMs' operands: rows up to a bucket (gemm_rows)
  x_ = DeviceMemory(T * H * 4, "residual stream");
  h_ = DeviceMemory(G * H * esize(), "activations");
  if (c.parallel_residual) h2_ = DeviceMemory(G * H * esize(), "activations");
  qkv_ = DeviceMemory(G * c.qkv_dim() * esize(), "activations");
  q_sink_ = DeviceMemory(T * c.q_dim() * esize(), "activations");
  rope_table_ = DeviceMemory(std::max<size_t>(T * 2 * c.rope.rotary_dim * 4, 16), "activations");
  attn_ = DeviceMemory(G * c.q_dim() * esize(), "activations");
  o_ = DeviceMemory(G * H * esize(), "activations");
  up_ = DeviceMemory(G * up_width * esize(), "activations");
  act_ = DeviceMemory(G * c.intermediate_size * esize(), "activations");
  m_ = DeviceMemory(G * H * esize(), "activations");
  if (H % 16 == 0) {  // 4 bytes a hidden unit (CudaTuning::fp8_norm_in_gemv)
    norm_sumsq_ = DeviceMemory(kernels::kFp8GemvMaxRows * (H / 16) * 4, "activations");
    pair_barrier_ = DeviceMemory(kernels::kFp8PairBarrierBytes, "activations");
    RILL_CUDA(cudaMemsetAsync(pair_barrier_.get(), 0, pair_barrier_.bytes(), stream_));
  }
  normed_ = DeviceMemory(R * H * esize(), "activations");
  logits_ = DeviceMemory(R * V * 4, "logits");
  if (tp_.comm)
    gather_ = DeviceMemory(size_t(tp_.comm->world()) * R * vocab_.padded * 4, "gathered logits");
  sampled_ = DeviceMemory(R * 4, "sampled tokens");
  logprob_logits_ = DeviceMemory(size_t(max_batch_) * V * 4, "logprobs");
  logprobs_ = DeviceMemory(size_t(max_batch_) * kLogprobsWidth * 4, "logprobs");
  attn_ws_ = DeviceMemory(kernels::decode_attention_workspace_bytes(max_batch_, c.num_heads, c.head_dim, kMaxSplits),
                          "attention workspace");
  // The split merge's counters must start at zero; every launch leaves them zero again.
  if (attn_ws_.bytes() > 0) RILL_CUDA(cudaMemsetAsync(attn_ws_.get(), 0, attn_ws_.bytes(), stream_));
  output_counts_ = DeviceMemory(size_t(max_batch_) * V * 4, "penalty state");
  prompt_mask_ = DeviceMemory(size_t(max_batch_) * V, "penalty state");
  for (int s = max_batch_ - 1; s >= 0; --s) free_state_slots_.push_back(s);
  const cuda::StepShape biggest{max_tokens_, max_batch_, max_batch_, max_rows_, max_rows_, max_blocks_, true};
  const size_t meta_bytes = cuda::StepLayout::make(biggest).bytes;
  meta_bytes_ = meta_bytes;
  meta_dev_ = DeviceMemory(meta_bytes, "step metadata");
  mask_words_ = (c.vocab_size + 31) / 32;
  const size_t mask_bytes = size_t(max_batch_) * mask_words_ * 4;
  masks_dev_ = DeviceMemory(mask_bytes, "token masks");
  logits_host_ = PinnedMemory(R * V * 4, "logits");
  for (HostBuffers& h : host_) {
    h.meta = PinnedMemory(meta_bytes, "step metadata");
    h.sampled = PinnedMemory(R * 4, "sampled tokens");
    h.logprobs = PinnedMemory(size_t(max_batch_) * kLogprobsWidth * 4, "logprobs");
    h.masks = PinnedMemory(mask_bytes, "token masks");
  }
}

void CudaRunner::size_kv_pool(double fraction) {
  size_t free_b = 0, total_b = 0;
  RILL_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double keep = (1.0 - fraction) * double(total_b) + 512.0 * (1 << 20);  // graphs, cuBLAS, fragmentation
  const double budget = double(free_b) - keep;
  // In bytes: an fp8 cache holds twice the tokens of a 16-bit one in the same memory.
  const size_t block_bytes =
      size_t(layout_.block_stride()) * layout_.element_bytes() * config_.num_layers;
  long long blocks = budget > 0 ? static_cast<long long>(budget / double(block_bytes)) : 0;
  // The ranks of a group take the same decisions on their pools: the same number of blocks.
  if (tp_.host) blocks = tp_.host->min(tp_.comm->rank(), blocks);
  if (blocks < max_blocks_ + 1)
    throw Error(ErrorCode::kResourceExhausted,
                "not enough GPU memory for the KV cache: " + std::to_string(std::max(0.0, budget) / 1048576.0) +
                    " MiB left after the weights, one sequence needs " +
                    std::to_string(double(block_bytes) * max_blocks_ / 1048576.0) + " MiB");
  const int usable = static_cast<int>(std::min<long long>(blocks - 1, INT32_MAX / layout_.block_size - 1));
  layout_.num_blocks = usable + 1;  // the last block is a trash target for padded graph rows
  trash_block_ = usable;
  cache_ = DeviceMemory(size_t(layout_.num_blocks) * block_bytes, "KV cache");
  kv_ =
      std::make_unique<KvCacheManager>(usable, layout_.block_size, config_.max_position_embeddings,
                                       config_.sliding_window, cache_identity_);
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

int CudaRunner::prefill_token_granularity() const {
  return row_bucket_;
}

int CudaRunner::gemm_rows(int T, const cuda::StepPlan& plan, const void* x,
                          const cuda::DeviceLinear& w, int K) const {
  // admit() bounds T by max_tokens_, so the rounded rows stay within the buffers' gemm_rows_cap_.
  return std::min(gemm_rows_cap_,
                  gemm_->padded_rows(T, plan.shape.prefill > 0, row_bucket_, x, w, K));
}

// Every GEMM shape a step can meet, but for decode-only steps' (graphs, or the GEMVs): each
// projection at every bucket row count, for each distinct combination of weight formats among
// the layers (an fp8 checkpoint may keep some layers in 16 bits), and the LM head at every row
// count past the GEMV's. fp8 weights create their cuBLASLt plans here and run the W8A8 GEMM once
// (Gemm::warm_up; the GEMV has no per-shape cost). The inputs are whatever the buffers hold.
void CudaRunner::warm_up_gemms() {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = config_;
  const int H = c.hidden_size, I = c.intermediate_size, N_up = c.gated_mlp ? 2 * I : I;
  int shapes = 0, fp8_shapes = 0, partial = 0;
  auto meet = [&](const void* x, const cuda::DeviceLinear& w, void* y, int M, int N, int K,
                  bool y_f32) {
    const int rows = gemm_->warm_up(x, w, y, M, N, K, y_f32);
    shapes += rows > 0;
    fp8_shapes += rows > 0 && w.fp8();
    return rows;
  };
  auto format = [](const cuda::DeviceLinear& p) {  // 0: 16-bit, 1: fp8 per-row, 2: fp8 block
    if (!p.fp8()) return 0;
    return p.scale_layout == kernels::Fp8ScaleLayout::kBlock128 ? 2 : 1;
  };
  std::vector<int> formats_met;  // one key per layer: its four projections' formats
  for (const cuda::DeviceLayer& w : weights_->layers()) {
    const int key = ((format(w.wqkv) * 3 + format(w.wo)) * 3 + format(w.wup)) * 3 + format(w.wdown);
    if (std::find(formats_met.begin(), formats_met.end(), key) != formats_met.end()) continue;
    formats_met.push_back(key);
    for (int M = row_bucket_; M <= gemm_rows_cap_; M += row_bucket_) {
      // A bucket shape cuBLASLt takes only in part leaves the fp8 GEMV the real rows past it.
      partial += meet(h_.get(), w.wqkv, qkv_.get(), M, c.qkv_dim(), H, false) < M;
      partial += meet(attn_.get(), w.wo, o_.get(), M, H, c.q_dim(), false) < M;
      partial += meet(h_.get(), w.wup, up_.get(), M, N_up, H, false) < M;
      partial += meet(act_.get(), w.wdown, m_.get(), M, H, I, false) < M;
    }
  }
  // The LM head runs on the logit rows, unpadded (a group's rank writes into its part of the
  // gathered rows): every count past the GEMV's.
  const cuda::DeviceLinear& head = weights_->lm_head();
  for (int M = 1; M <= max_rows_; ++M)
    meet(normed_.get(), head, logits_.get(), M, static_cast<int>(vocab_.rows()), H, true);
  RILL_CUDA(cudaStreamSynchronize(stream_));
  spdlog::info(
      "cuda runner: met {} GEMM shapes ({} fp8) at start in {:.0f} ms", shapes, fp8_shapes,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  if (partial > 0)
    spdlog::warn(
        "cuda runner: cuBLASLt takes only part of {} fp8 GEMM shapes of {}-row multiples; the fp8 "
        "GEMV takes the real rows past what it takes",
        partial, row_bucket_);
}

int CudaRunner::decode_bucket(int batch) const {
  if (!tuning_.cuda_graphs) return 0;
  for (int b : kBuckets)
    if (b >= batch && b <= max_batch_) return b;
  return 0;
}

int CudaRunner::attention_splits(int decode_seqs, int max_keys) const {
  if (tuning_.decode_splits > 0) return tuning_.decode_splits;
  // Measured on H100 at batch 1 (docs/performance-history.md): up to ~256 keys one CTA per kv
  // head beats any split (the merge costs more than it saves); beyond, about one split per 64
  // keys, as many CTAs as fit four per SM (CudaTuning::decode_split_ctas_per_sm), rounded down
  // to a power of two so that a sequence growing from 256 to 65k keys needs at most 5 graphs per
  // batch bucket.
  if (max_keys <= kOneSplitKeys) return 1;
  const int ctas = std::max(1, decode_seqs * config_.num_kv_heads);
  const int want = std::min(
      {(max_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit,
       tuning_.decode_split_ctas_per_sm * num_sms_ / ctas, kMaxSplits});
  int splits = 1;
  while (splits * 2 <= want) splits *= 2;
  return splits;
}

void CudaRunner::add_sequence(const SequenceSpec& spec) {
  validate_sequence(spec, config_.vocab_size);
  if (seqs_.count(spec.id)) throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(spec.id) + " exists");
  SeqInfo info;
  info.sampling.params = spec.sampling;
  // A resumed sequence: its draws continue at generated.size(), its generated tokens count as
  // output (the prefill that recomputes them marks them as prompt too, which changes nothing).
  info.sampling.step = info.sampling.first_step = spec.generated.size();
  if (spec.sampling.has_penalties()) {
    if (free_state_slots_.empty()) throw Error(ErrorCode::kResourceExhausted, "too many sequences with penalties");
    info.sampling.state_slot = free_state_slots_.back();
    const size_t V = config_.vocab_size;
    int32_t* counts = output_counts_.as<int32_t>() + info.sampling.state_slot * V;
    if (spec.generated.empty()) {
      RILL_CUDA(cudaMemsetAsync(counts, 0, V * 4, stream_));
    } else {
      // From pageable memory: the call returns once the host row is staged (resumes are rare).
      std::vector<int32_t> host(V, 0);
      for (int32_t t : spec.generated) ++host[t];
      RILL_CUDA(cudaMemcpyAsync(counts, host.data(), V * 4, cudaMemcpyHostToDevice, stream_));
    }
    uint8_t* mask = prompt_mask_.as<uint8_t>() + info.sampling.state_slot * V;
    if (!spec.prefix || spec.prefix->tokens == 0) {
      RILL_CUDA(cudaMemsetAsync(mask, 0, V, stream_));
    } else {  // cached tokens count as prompt, as if they had been fed (pageable, as above)
      std::vector<uint8_t> host(V, 0);
      for (int32_t t : spec.prefix_tokens.first(static_cast<size_t>(spec.prefix->tokens)))
        host[t] = 1;
      RILL_CUDA(cudaMemcpyAsync(mask, host.data(), V, cudaMemcpyHostToDevice, stream_));
    }
  }
  kv_->add_sequence(spec.id, spec.cache,
                    spec.prefix ? &*spec.prefix : nullptr);  // validates the policy
  if (info.sampling.state_slot >= 0) free_state_slots_.pop_back();
  seqs_.emplace(spec.id, info);
}

void CudaRunner::remove_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (it->second.sampling.state_slot >= 0) free_state_slots_.push_back(it->second.sampling.state_slot);
  seqs_.erase(it);
  last_rows_.erase(id);
  wait_for_restore(id);  // its blocks go back to the pool: later steps must follow the copy
  drop_offloading(id);   // likewise for an offload's copy still reading them
  forget_offloaded(id);
  kv_->remove_sequence(id);  // blocks a step in flight still writes are reused only after it
}

void CudaRunner::profile_snapshot_and_stop() { profiler_.reset(); }

void CudaRunner::set_profiling(bool on) {
  profiler_ = on ? std::make_unique<Profiler>(stream_) : nullptr;
  profile_ = {};
}

cudaGraphExec_t CudaRunner::graph_for(int bucket, const StepPlan& plan, bool sample) {
  // One graph per batch bucket, attention split count (the grid of decode attention), whether
  // log-probabilities are computed and whether it samples (steps with late masks sample after
  // the graph, once supply_masks has their masks).
  const int key =
      ((bucket * (kMaxSplits + 1) + attention_splits(plan.shape.decode, plan.max_decode_keys)) * 2 +
       (plan.shape.logprobs ? 1 : 0)) *
          2 +
      (sample ? 0 : 1);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    if (!(graph_shapes_.at(key) == plan.shape))
      throw Error(ErrorCode::kInternal, "graph shape changed");
    return it->second;
  }
  const bool group = tp_.host && tp_.comm->world() > 1;
  if (group) quiesce_group(key);
  tp_stage(tp_, "capturing a decode graph");
  cudaGraph_t graph;
  // Thread-local mode: the other ranks' threads keep their CUDA calls legal during this capture.
  RILL_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_forward(plan, false, sample);
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
  if (group) {  // uploaded everywhere before any rank launches it (its collectives would spin)
    RILL_CUDA(cudaGraphUpload(exec, stream_));
    RILL_CUDA(cudaStreamSynchronize(stream_));
    tp_stage(tp_, "waiting for the other ranks' graph captures");
    tp_.host->barrier();
  }
  tp_stage(tp_, "step");
  return exec;
}

// The graph of every decode step the runner can take at a bucket: a padded plan of `bucket`
// rows (all rows padding, as a decode-only bucketed step's shape is fixed by its bucket) whose
// longest key range gives each split count attention_splits can return for that bucket. Only
// shapes are captured; the metadata is uploaded by each step that replays the graph.
void CudaRunner::precapture_graphs() {
  const auto t0 = std::chrono::steady_clock::now();
  const int max_keys = std::max(1, config_.max_position_embeddings);
  int captured = 0;
  std::string shapes;
  std::vector<char> scratch;
  for (const int bucket : kBuckets) {
    if (bucket > max_batch_) break;
    // Split counts change only where ceil(keys / kMinKeysPerSplit) does.
    std::map<int, int> keys_of_splits;  // split count -> a key range that gives it
    for (int keys = kMinKeysPerSplit; keys < max_keys; keys += kMinKeysPerSplit)
      keys_of_splits.emplace(attention_splits(bucket, keys), keys);
    keys_of_splits.emplace(attention_splits(bucket, 1), 1);
    keys_of_splits.emplace(attention_splits(bucket, max_keys), max_keys);
    for (const auto& [splits, keys] : keys_of_splits) {
      // The packed metadata goes to scratch: steps in flight (after set_tuning) own host_.
      scratch.resize(meta_bytes_);
      cuda::StepPlan plan = cuda::plan_step({}, {}, *kv_, max_blocks_, bucket, trash_block_, {}, {}, {},
                                            scratch.data(), dmeta());
      plan.max_decode_keys = keys;
      for (const bool sample : {true, false}) graph_for(bucket, plan, sample);
      captured += 2;
      if (!shapes.empty()) shapes += ' ';
      shapes += std::to_string(bucket);
      shapes += 'x';
      shapes += std::to_string(splits);
    }
  }
  RILL_CUDA(cudaStreamSynchronize(stream_));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("cuda runner: captured {} decode graphs (batch x splits: {}) in {:.1f} ms", captured,
               shapes, ms);
}

// Before a group's ranks capture and instantiate a graph (which allocate on the device), every
// GPU finishes its work: no collective may be in flight while a rank allocates, or the
// allocation waits for a device whose collective waits for this rank (the NCCL documentation's
// multi-GPU-per-process deadlock). All ranks come here at the same step: they hold the same
// sequences and agree on num_sms_, so they choose the same key; it is checked.
void CudaRunner::quiesce_group(int key) {
  tp_stage(tp_, "agreeing on a new decode graph");
  const int rank = tp_.comm->rank();
  const int64_t lo = tp_.host->min(rank, key), hi = -tp_.host->min(rank, -int64_t(key));
  if (lo != hi)
    throw Error(ErrorCode::kInternal,
                "tensor parallel: the ranks chose different decode graphs (" + std::to_string(lo) +
                    " .. " + std::to_string(hi) + ")");
  tp_stage(tp_, "draining the stream before a graph capture");
  RILL_CUDA(cudaStreamSynchronize(stream_));
  tp_stage(tp_, "waiting for the other ranks to drain");
  tp_.host->barrier();
}

std::vector<int64_t> CudaRunner::admit(std::span<const StepInput> inputs, bool& any_logits) {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(inputs.size());
  // Validate everything before touching any state.
  const auto appends = validate_step(
      inputs, c.vocab_size, [&](SeqId id) { return seqs_.count(id) != 0; },
      [&](SeqId id) { return last_rows_.count(id) != 0; });
  int total = 0, extra_rows = 0;
  any_logits = false;
  for (const StepInput& in : inputs) {
    total += static_cast<int>(in.tokens.size());
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
  if (any_logits && std::any_of(in_flight_.begin(), in_flight_.end(),
                                [](const InFlight& f) { return f.plan.any_logits; }))
    throw Error(ErrorCode::kInvalidArgument,
                "a step returning logits is in flight: finish() it before launching another");
  // An offloaded sequence takes no step until restored (its blocks may still be copying out).
  for (const StepInput& in : inputs)
    if (offloaded_.count(in.id))
      throw Error(ErrorCode::kInvalidArgument,
                  "sequence " + std::to_string(in.id) + " is offloaded: restore it first");
  kv_->check_append(appends);
  std::vector<int64_t> starts(n);
  // kLastSampled inputs name their token later (finish() reports it:
  // KvCacheManager::resolve_sampled).
  for (int k = 0; k < n; ++k) starts[k] = kv_->append(inputs[k].id, inputs[k].tokens);
  return starts;
}

void CudaRunner::launch(std::span<const StepInput> inputs) {
  check_launch_room(static_cast<int>(in_flight_.size()));
  check_no_masks_due(!in_flight_.empty() && !in_flight_.back().late_ids.empty(), "launch");
  if (profiler_ && !in_flight_.empty())
    throw Error(ErrorCode::kInvalidArgument, "profiled steps run one at a time: finish() first");
  InFlight f;
  f.buffer = next_buffer_;
  f.timed = step_timing_;
  if (inputs.empty()) {
    f.empty = true;
    last_rows_.clear();
    in_flight_.push_back(std::move(f));
    return;
  }
  bool any_logits = false;
  const std::vector<int64_t> starts = admit(inputs, any_logits);
  try {
    plan_and_enqueue(inputs, starts, any_logits, f);
  } catch (...) {
    // Appended but not launched: the blocks this step was to write must not be served.
    for (const StepInput& in : inputs) kv_->discard_published(in.id);
    kv_->take_copies();
    throw;
  }
  next_buffer_ = (next_buffer_ + 1) % kMaxStepsInFlight;
  in_flight_.push_back(std::move(f));
}

void CudaRunner::plan_and_enqueue(std::span<const StepInput> inputs,
                                  const std::vector<int64_t>& starts, bool any_logits,
                                  InFlight& f) {
  const int n = static_cast<int>(inputs.size());
  if (!restoring_.empty())  // a restore not yet seen done: the step waits for its copy
    for (int k = 0; k < n; ++k) wait_for_restore(inputs[k].id);
  // Copy-on-write: shared ring blocks this step overwrites are copied first (stream order).
  for (const BlockCopy& c : kv_->take_copies()) copy_pool_block(c.src, c.dst);
  std::vector<const cuda::SamplingSlot*> sampling(n);
  std::vector<int32_t> last_row(n, -1);  // sampled_ row a kLastSampled token is read from
  int decode = 0;
  for (int k = 0; k < n; ++k) {
    sampling[k] = &seqs_.at(inputs[k].id).sampling;
    decode += inputs[k].tokens.size() == 1;
    if (inputs[k].tokens.size() == 1 && inputs[k].tokens[0] == kLastSampled)
      last_row[k] = last_rows_.at(inputs[k].id);
  }
  HostBuffers& h = host_[f.buffer];
  // Grammar masks of the constrained rows into the pinned staging rows (the sequences' own
  // buffers may change once launch() returns); enqueue_step uploads them.
  std::vector<int32_t> mask_row(n, -1);
  f.mask_rows = 0;
  for (int k = 0; k < n; ++k) {
    if (inputs[k].mask.empty()) continue;
    mask_row[k] = f.mask_rows;
    std::copy(inputs[k].mask.begin(), inputs[k].mask.end(),
              h.masks.as<uint32_t>() + size_t(f.mask_rows) * mask_words_);
    ++f.mask_rows;
  }
  for (int k = 0; k < n; ++k) {  // rows named now, staged and uploaded by supply_masks
    if (!inputs[k].mask_later) continue;
    mask_row[k] = f.mask_rows + static_cast<int32_t>(f.late_ids.size());
    f.late_ids.push_back(inputs[k].id);
    f.late_mask_rows.push_back(mask_row[k]);
  }
  const int bucket = (decode == n && !any_logits && !profiler_) ? decode_bucket(n) : 0;
  f.plan = cuda::plan_step(inputs, starts, *kv_, max_blocks_, bucket, trash_block_, sampling,
                           last_row, mask_row, h.meta.as<char>(), dmeta());
  for (const StepInput& in : inputs) f.ids.push_back(in.id);
  enqueue_step(inputs, f.plan, bucket, f.mask_rows, !f.late_ids.empty(), h);
  last_rows_.clear();
  for (int k = 0; k < n; ++k) {
    if (f.plan.sampled_index[k] < 0) continue;
    ++seqs_.at(inputs[k].id).sampling.step;  // the draw this step makes
    last_rows_[inputs[k].id] = f.plan.sampled_index[k];
  }
}

void CudaRunner::enqueue_step(std::span<const StepInput> inputs, const StepPlan& plan, int bucket,
                              int mask_rows, bool late, HostBuffers& h) {
  const int n = static_cast<int>(inputs.size());
  if (step_timing_) RILL_CUDA(cudaEventRecord(h.begin.get(), stream_));
  RILL_CUDA(cudaMemcpyAsync(meta_dev_.get(), h.meta.get(), plan.layout.bytes,
                            cudaMemcpyHostToDevice, stream_));
  if (mask_rows > 0)
    RILL_CUDA(cudaMemcpyAsync(masks_dev_.get(), h.masks.get(), size_t(mask_rows) * mask_words_ * 4,
                              cudaMemcpyHostToDevice, stream_));
  // Penalised sequences that have not sampled yet in this runner: their tokens are prompt
  // tokens (a resumed sequence's too); remember them on the GPU.
  for (int k = 0; k < n; ++k) {
    const cuda::SamplingSlot& s = seqs_.at(inputs[k].id).sampling;
    if (s.state_slot < 0 || s.step > s.first_step || s.params.repetition_penalty == 1.0f) continue;
    const int32_t* toks = reinterpret_cast<const int32_t*>(dmeta() + plan.layout.tokens) + plan.input_first_row[k];
    RILL_CUDA(kernels::launch_mark_prompt(prompt_mask_.as<uint8_t>(), config_.vocab_size,
                                          s.state_slot, toks,
                                          static_cast<int>(inputs[k].tokens.size()), stream_));
  }
  if (bucket > 0) {
    RILL_CUDA(cudaGraphLaunch(graph_for(bucket, plan, !late), stream_));
  } else {
    enqueue_forward(plan, plan.any_logits, !late);
  }
  if (!late) enqueue_downloads(plan, h);
}

// The late rows' masks into their staging rows (a row not named: all tokens allowed), uploaded
// behind the step's forward pass; then the sampling and the downloads the launch left out. The
// step's metadata and logits are still on the device: the next step is launched after this
// (launch refuses while it is due), so nothing has overwritten them.
void CudaRunner::supply_masks(std::span<const LateMask> masks) {
  InFlight* f = in_flight_.empty() ? nullptr : &in_flight_.back();
  const std::vector<SeqId> none;
  const std::vector<size_t> rows =
      validate_late_masks(masks, f ? f->late_ids : none, config_.vocab_size);
  HostBuffers& h = host_[f->buffer];
  uint32_t* staging = h.masks.as<uint32_t>();
  const int first = f->mask_rows, count = static_cast<int>(f->late_ids.size());
  std::fill(staging + size_t(first) * mask_words_, staging + size_t(first + count) * mask_words_,
            ~0u);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(masks[i].mask.begin(), masks[i].mask.end(),
              staging + size_t(f->late_mask_rows[rows[i]]) * mask_words_);
  RILL_CUDA(cudaMemcpyAsync(masks_dev_.as<uint32_t>() + size_t(first) * mask_words_,
                            staging + size_t(first) * mask_words_, size_t(count) * mask_words_ * 4,
                            cudaMemcpyHostToDevice, stream_));
  enqueue_sampling(f->plan);
  enqueue_downloads(f->plan, h);
  f->late_ids.clear();
  f->late_mask_rows.clear();
}

void CudaRunner::enqueue_downloads(const StepPlan& plan, HostBuffers& h) {
  if (plan.shape.sampled > 0)
    RILL_CUDA(cudaMemcpyAsync(h.sampled.get(), sampled_.get(), size_t(plan.shape.sampled) * 4,
                              cudaMemcpyDeviceToHost, stream_));
  if (plan.shape.logprobs)
    RILL_CUDA(cudaMemcpyAsync(h.logprobs.get(), logprobs_.get(),
                              size_t(plan.shape.sampled) * kLogprobsWidth * 4,
                              cudaMemcpyDeviceToHost, stream_));
  RILL_CUDA(cudaEventRecord(h.end.get(), stream_));
}

StepOutput CudaRunner::finish() {
  if (in_flight_.empty()) throw_nothing_in_flight();
  check_no_masks_due(!in_flight_.front().late_ids.empty(), "finish");
  const InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (f.empty) return {};
  HostBuffers& h = host_[f.buffer];
  tp_stage(tp_, "waiting for the step on the GPU");
  RILL_CUDA(cudaEventSynchronize(h.end.get()));
  if (f.timed) {
    float ms = 0;
    RILL_CUDA(cudaEventElapsedTime(&ms, h.begin.get(), h.end.get()));
    last_step_gpu_ms_ = ms;
  }
  if (profiler_) {
    profiler_->collect(profile_);
    ++profile_.steps;
  }
  StepOutput out = collect_outputs(f.plan, h);
  // The prefix cache names blocks by their tokens: samples fed as kLastSampled are known now.
  for (size_t k = 0; k < out.sampled.size(); ++k)
    if (out.sampled[k] >= 0) kv_->resolve_sampled(f.ids[k], out.sampled[k]);
  return out;
}

StepOutput CudaRunner::collect_outputs(const StepPlan& plan, const HostBuffers& h) const {
  const int32_t* sampled = h.sampled.as<int32_t>();
  const int n = static_cast<int>(plan.sampled_index.size());
  StepOutput out;
  if (plan.shape.logprobs) {  // kernels::LogprobsParams::out rows, by sampled row
    out.logprobs.resize(n);
    for (int k = 0; k < n; ++k) {
      if (plan.logprobs[k] < 0) continue;
      const float* row = h.logprobs.as<float>() + size_t(plan.sampled_index[k]) * kLogprobsWidth;
      out.logprobs[k].sampled = row[0];
      for (int i = 0; i < plan.logprobs[k]; ++i) {
        int32_t id;
        std::memcpy(&id, &row[1 + 2 * i], 4);
        if (id < 0) break;  // fewer tokens than asked for
        out.logprobs[k].top.push_back({id, row[2 + 2 * i]});
      }
    }
  }
  out.sampled.assign(n, -1);
  out.logits_row.assign(n, -1);
  const float* logits = logits_host_.as<float>();
  int64_t kept = 0;
  for (int k = 0; k < n; ++k) {
    if (plan.sampled_index[k] >= 0) out.sampled[k] = sampled[plan.sampled_index[k]];
    if (plan.logits_first[k] >= 0) {
      const size_t V = config_.vocab_size;
      out.logits.insert(out.logits.end(), logits + size_t(plan.logits_first[k]) * V,
                        logits + size_t(plan.logits_first[k] + plan.logits_count[k]) * V);
      out.logits_row[k] = kept;
      kept += plan.logits_count[k];
    }
  }
  return out;
}

}  // namespace rill
