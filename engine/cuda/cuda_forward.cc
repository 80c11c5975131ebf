// CudaRunner's forward pass: what one step enqueues on the stream (embedding, layers, final norm,
// LM head, sampling), eagerly or into a CUDA graph. The runner (cuda_runner.cc) plans the step,
// uploads its metadata and owns the graphs.
#include <cmath>

#include "engine/cuda/cuda_runner.h"
#include "engine/cuda/step_profiler.h"
#include "engine/error.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"
#include "rill/kernels/logprobs.h"
#include "rill/kernels/rope.h"
#include "rill/kernels/sampling.h"

namespace rill {

using cuda::StepPlan;

namespace {

// Ring depth of the decode GEMVs, measured on the H100 (docs/performance-history.md, eleventh
// session): with three iterations in flight (a ring of 4) instead of four, the o and gate|up
// GEMVs, and the qkv GEMV from two tokens on, issue less before their PDL wait, which leaves the
// memory system to the short kernel they wait for (attention, add + norm); 7B batch 1 @ 515
// gained 0.03-0.05 ms, batch 8 0.12-0.14 ms. Depth changes no sum.
constexpr int kShallowRing = 4, kDeepRing = 5;

// What every kernel that reads or writes one layer's cache takes (RoPE + K/V write, K/V write,
// decode and prefill attention): the dtype, the head shapes and the layer's cache.
template <typename Params>
Params layer_cache_params(kernels::DType dtype, const ModelConfig& c, void* layer_cache,
                          const kernels::KvCacheLayout& layout) {
  Params p;
  p.dtype = dtype;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.cache = layer_cache;
  p.layout = layout;
  return p;
}

// The same for attention, with its 1 / sqrt(head_dim).
template <typename Params>
Params attention_params(kernels::DType dtype, const ModelConfig& c, void* layer_cache,
                        const kernels::KvCacheLayout& layout) {
  Params p = layer_cache_params<Params>(dtype, c, layer_cache, layout);
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return p;
}

}  // namespace

int CudaRunner::projection_config(int projection, int N, int K, int T) const {
  const int forced = tuning_.projection_config(projection);
  if (forced >= 0) return forced;
  const bool shallow =
      projection == kO || projection == kUp || (projection == kQkv && T > 1);
  // Only where the shape otherwise used is the usual deep ring (not forced to another one).
  const kernels::GemvConfigInfo u =
      kernels::gemv_config_info(gemm_->gemv_config(N, K, deep_gemv(projection)));
  if (!shallow || u.stages != kDeepRing || u.unroll != 1) return -1;
  return kernels::gemv_ring_config(u.warps, kShallowRing);  // same warps: same sums
}

// Steps of up to this many tokens take the norms into their fp8 GEMVs. H100, 515 cached, piped ms
// with and without (docs/performance.md F18): 7B 3.031 / 3.137 at 1 token, 3.299 / 3.394 at 2,
// 3.610 / 3.659 at 4, 4.089 / 4.028 at 8; 8B 3.501 / 3.583, 3.630 / 3.675, 3.993 / 3.975,
// 4.459 / 4.317. Past 2 tokens the copies of the sums (M x H / 16 floats per CTA) and warp 0's
// longer epilogue cost what the boundary saved.
constexpr int kNormInGemvMaxTokens = 2;

bool CudaRunner::norm_in_gemv(int li, int T) const {
  const ModelConfig& c = config_;
  const int H = c.hidden_size, I = c.intermediate_size;
  if (!tuning_.fp8_norm_in_gemv || c.norm != NormKind::kRmsNorm || c.parallel_residual ||
      tp_.comm || !norm_sumsq_.get() || H % 16 != 0 || T > kNormInGemvMaxTokens ||
      T * (H / 16) > kernels::kFp8NormInMaxSums ||
      !tuning_.fused_decode || !c.gated_mlp || !weights_->gate_up_interleaved())
    return false;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  return !w.bo && !w.bdown && !w.attn_norm_bias && !w.mlp_norm_bias && w.wqkv.fp8() &&
         w.wo.fp8() && w.wup.fp8() && w.wdown.fp8() && gemm_->uses_gemv(h_.get(), w.wqkv, T, H) &&
         gemm_->uses_gemv(attn_.get(), w.wo, T, c.q_dim()) &&
         gemm_->uses_gemv(h_.get(), w.wup, T, H) && gemm_->uses_gemv(act_.get(), w.wdown, T, I);
}

bool CudaRunner::pair_down_qkv(int T) const {
  return tuning_.fp8_pair_down_qkv && T <= 8 && pair_barrier_.get();
}

void CudaRunner::gemv_fp8_with_norms(const void* x, const cuda::DeviceLinear& w, void* y, int T,
                                     int N, int K, int projection, bool norm_in,
                                     const void* norm_weight) {
  gemm_->gemv_fp8(fp8_norm_gemv_params(x, w, y, T, N, K, projection, norm_in, norm_weight));
}

kernels::Fp8GemvParams CudaRunner::fp8_norm_gemv_params(const void* x, const cuda::DeviceLinear& w,
                                                        void* y, int T, int N, int K,
                                                        int projection, bool norm_in,
                                                        const void* norm_weight) const {
  kernels::Fp8GemvParams p = gemm_->fp8_gemv_params(x, w, y, T, N, K, false);
  p.deep_prologue = fp8_deep_gemv(projection, T);
  p.config = projection_config(projection, w, N, K, T);
  if (norm_in) {
    p.norm_in.sumsq = norm_sumsq_.as<float>();
    p.norm_in.eps = config_.norm_eps;
  }
  if (norm_weight) {
    p.norm_out.residual = x_.as<float>();
    p.norm_out.weight = norm_weight;
    p.norm_out.sumsq = norm_sumsq_.as<float>();
  }
  return p;
}

// Decode rows' attention over the paged cache (split count from the step's longest key range):
// qkv_ / q_sink_ -> attn_.
void CudaRunner::enqueue_decode_attention(const StepPlan& plan, void* layer_cache,
                                          const kernels::KvCacheLayout& layout, const void* bias) {
  const ModelConfig& c = config_;
  const cuda::StepShape& sh = plan.shape;
  auto p =
      attention_params<kernels::DecodeAttentionParams>(weights_->dtype(), c, layer_cache, layout);
  p.num_seqs = sh.decode;
  p.q = qkv_.get();
  p.q_stride = c.qkv_dim();
  p.q_sink = q_sink_.get();
  p.q_sink_stride = c.q_dim();
  p.seqs = reinterpret_cast<const kernels::DecodeSeq*>(dmeta() + plan.layout.decode);
  p.out = attn_.get();
  p.num_splits = attention_splits(sh.decode, plan.max_decode_keys);
  p.min_keys_per_split = kMinKeysPerSplit;
  p.early_kv_loads = tuning_.early_kv_loads;
  p.cluster_merge = tuning_.cluster_merge;
  p.workspace = attn_ws_.get();
  if (rope_in_attention(plan)) {  // raw QKV rows; rope_table_ filled at the start of the step
    p.rope.table = rope_table_.as<float>();
    p.rope.rotary_dim = c.rope.rotary_dim;
    p.rope.qkv_bias = bias;
  }
  // Tensor cores forced on only where that kernel applies.
  p.use_mma =
      tuning_.decode_mma == 1 &&
              !kernels::decode_mma_supported(p.num_heads, p.num_kv_heads, p.head_dim)
          ? 0
          : tuning_.decode_mma;
  RILL_CUDA(kernels::launch_decode_attention(p, stream_));
}

// Prefill chunks' causal attention over the cache and the chunk itself: qkv_ / q_sink_ -> attn_.
void CudaRunner::enqueue_prefill_attention(const StepPlan& plan, void* layer_cache,
                                           const kernels::KvCacheLayout& layout) {
  const ModelConfig& c = config_;
  auto p =
      attention_params<kernels::PrefillAttentionParams>(weights_->dtype(), c, layer_cache, layout);
  p.num_seqs = plan.shape.prefill;
  p.qkv = qkv_.get();
  p.qkv_stride = c.qkv_dim();
  p.q_sink = q_sink_.get();
  p.seqs = reinterpret_cast<const kernels::PrefillSeq*>(dmeta() + plan.layout.prefill);
  p.out = attn_.get();
  p.max_tokens = plan.max_prefill_tokens;
  RILL_CUDA(kernels::launch_prefill_attention(p, stream_));
}

// QKV projection, RoPE + KV write, attention over the cache (and the fresh chunk), prefill K/V
// write, output projection: h_ (normed input) -> o_.
void CudaRunner::enqueue_attention(int li, const StepPlan& plan, const LayerNorms& norms) {
  const ModelConfig& c = config_;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  const cuda::StepShape& sh = plan.shape;
  const cuda::StepLayout& L = plan.layout;
  const kernels::DType dt = weights_->dtype();
  const int T = sh.tokens, H = c.hidden_size;
  char* layer_cache =
      cache_.as<char>() + size_t(li) * layout_.layer_stride() * layout_.element_bytes();
  kernels::KvCacheLayout layout = layout_;
  if (layout.cache_dtype == kernels::KvDType::kFp8E4M3) {  // the layer's (calibrated) scales
    layout.k_scale = w.kv_scales.k;
    layout.v_scale = w.kv_scales.v;
  }

  timed(Profiler::kGemm, [&] {
    if (norms.qkv_paired) return;  // run by the previous layer's down launch
    if (norms.qkv_in) {
      gemv_fp8_with_norms(h_.get(), w.wqkv, qkv_.get(), T, c.qkv_dim(), H, kQkv, true, nullptr);
      return;
    }
    gemm_->run(h_.get(), w.wqkv, qkv_.get(), T, c.qkv_dim(), H, false, deep_gemv(kQkv, w.wqkv, T),
               projection_config(kQkv, w.wqkv, c.qkv_dim(), H, T), gemm_rows(T, plan, h_.get(), w.wqkv, H));
  });
  if (!rope_in_attention(plan))
    timed(Profiler::kNorm, [&] {
      auto p = layer_cache_params<kernels::RopeKvParams>(dt, c, layer_cache, layout);
      p.num_tokens = T;
      p.rotary_dim = c.rope.rotary_dim;
      p.qkv = qkv_.get();
      p.qkv_stride = c.qkv_dim();
      p.qkv_bias = w.bqkv;
      p.q_sink = q_sink_.get();
      p.positions = reinterpret_cast<const int64_t*>(dmeta() + L.positions);
      p.sink_positions = reinterpret_cast<const int64_t*>(dmeta() + L.sink_positions);
      p.inv_freq = weights_->inv_freq();
      p.cache_slot = reinterpret_cast<const int32_t*>(dmeta() + L.rope_slot);
      if (rope_table_this_step(plan)) p.table = rope_table_.as<float>();
      RILL_CUDA(kernels::launch_rope_kv(p, stream_));
    });
  timed(Profiler::kAttention, [&] {
    if (sh.decode > 0) enqueue_decode_attention(plan, layer_cache, layout, w.bqkv);
    if (sh.prefill > 0) enqueue_prefill_attention(plan, layer_cache, layout);
  });
  if (sh.prefill > 0) {
    timed(Profiler::kNorm, [&] {  // prefill chunks store their K/V after attending to the old cache
      auto p = layer_cache_params<kernels::KvWriteParams>(dt, c, layer_cache, layout);
      p.num_tokens = T;
      p.qkv = qkv_.get();
      p.qkv_stride = c.qkv_dim();
      p.cache_slot = reinterpret_cast<const int32_t*>(dmeta() + L.late_slot);
      RILL_CUDA(kernels::launch_kv_write(p, stream_));
    });
  }
  timed(Profiler::kGemm, [&] {
    if (norms.mid) {  // the residual add and the MLP norm's input: h_
      gemv_fp8_with_norms(attn_.get(), w.wo, h_.get(), T, H, c.q_dim(), kO, false, w.mlp_norm);
      return;
    }
    gemm_->run(attn_.get(), w.wo, o_.get(), T, H, c.q_dim(), false, deep_gemv(kO, w.wo, T),
               projection_config(kO, w.wo, H, c.q_dim(), T),
               gemm_rows(T, plan, attn_.get(), w.wo, c.q_dim()));
  });
  if (!peer_sum(T))  // row-parallel o: partial sums (its bias comes after)
    enqueue_all_reduce(o_.get(), T, false);
}

// Up (or gate | up) projection, activation, down projection: in -> m_.
void CudaRunner::enqueue_mlp(int li, const void* in, const StepPlan& plan,
                             const LayerNorms& norms) {
  const ModelConfig& c = config_;
  const int T = plan.shape.tokens;
  const cuda::DeviceLayer& w = weights_->layers()[li];
  const int H = c.hidden_size, I = c.intermediate_size;
  // Decode: SiLU-and-mul in the GEMV's epilogue (gate and up rows interleaved at load).
  const bool silu_in_gemv = tuning_.fused_decode && c.gated_mlp &&
                            weights_->gate_up_interleaved() && gemm_->uses_gemv(in, w.wup, T, H);
  timed(Profiler::kGemm, [&] {
    if (!silu_in_gemv) {
      const int N = c.gated_mlp ? 2 * I : I;
      gemm_->run(in, w.wup, up_.get(), T, N, H, false, deep_gemv(kUp, w.wup, T),
                 projection_config(kUp, w.wup, N, H, T), gemm_rows(T, plan, in, w.wup, H));
      return;
    }
    if (w.wup.fp8()) {
      kernels::Fp8GemvParams p;
      p.M = T;
      p.N = 2 * I;
      p.K = H;
      p.x = in;
      p.w = w.wup.w;
      p.scale = w.wup.scale;
      p.scale_layout = w.wup.scale_layout;
      p.y = act_.get();
      p.epilogue = kernels::GemvEpilogue::kSiluMul;
      p.bias = w.bup;
      p.deep_prologue = fp8_deep_gemv(kUp, T);
      p.config = projection_config(kUp, w.wup, p.N, p.K, T);
      if (norms.mid) {
        p.norm_in.sumsq = norm_sumsq_.as<float>();
        p.norm_in.eps = c.norm_eps;
      }
      gemm_->gemv_fp8(p);
      return;
    }
    kernels::GemvParams p;
    p.M = T;
    p.N = 2 * I;
    p.K = H;
    p.x = in;
    p.w = w.wup.w;
    p.y = act_.get();
    p.epilogue = kernels::GemvEpilogue::kSiluMul;
    p.bias = w.bup;
    p.deep_prologue = deep_gemv(kUp);
    p.config = projection_config(kUp, p.N, p.K, T);
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
    if (tuning_.fp8_fused_quant && I <= kernels::kActivationFp8MaxWidth)
      if (const auto q = gemm_->fp8_input(act_.get(), w.wdown, T,
                                          gemm_rows(T, plan, act_.get(), w.wdown, I), H, I)) {
        p.out_fp8 = q->x;  // the down GEMM reads only these
        p.out_scales = q->scales;
        p.out = nullptr;
      }
    RILL_CUDA(kernels::launch_activation(p, stream_));
    if (p.out_fp8) gemm_->prequantized(act_.get(), T);
  });
  timed(Profiler::kGemm, [&] {
    if (norms.down_paired) {  // with the next layer's qkv, which reads h_
      const cuda::DeviceLayer& next = weights_->layers()[li + 1];
      gemm_->gemv_fp8_pair(
          fp8_norm_gemv_params(act_.get(), w.wdown, h_.get(), T, H, I, kDown, false,
                               next.attn_norm),
          fp8_norm_gemv_params(h_.get(), next.wqkv, qkv_.get(), T, c.qkv_dim(), H, kQkv, true,
                               nullptr),
          pair_barrier_.get());
      return;
    }
    if (norms.down_out) {  // the residual add and the next layer's attention norm's input: h_
      gemv_fp8_with_norms(act_.get(), w.wdown, h_.get(), T, H, I, kDown, false,
                          weights_->layers()[li + 1].attn_norm);
      return;
    }
    gemm_->run(act_.get(), w.wdown, m_.get(), T, H, I, false, deep_gemv(kDown, w.wdown, T),
               projection_config(kDown, w.wdown, H, I, T), gemm_rows(T, plan, act_.get(), w.wdown, I));
  });
  if (!peer_sum(T)) enqueue_all_reduce(m_.get(), T, false);  // row-parallel down, as o
}

void CudaRunner::enqueue_all_reduce(void* buf, int T, bool f32) {
  if (!tp_.comm) return;
  const auto type = f32 ? cuda::CollectiveType::kF32
                        : (weights_->dtype() == kernels::DType::kBF16 ? cuda::CollectiveType::kBF16
                                                                      : cuda::CollectiveType::kF16);
  tp_.comm->all_reduce_sum(buf, size_t(T) * config_.hidden_size, type, stream_);
}

void CudaRunner::enqueue_lm_head(int rows) {
  const ModelConfig& c = config_;
  const int H = c.hidden_size;
  if (!tp_.comm) {
    timed(Profiler::kGemm, [&] {
      gemm_->run(normed_.get(), weights_->lm_head(), logits_.get(), rows, c.vocab_size, H, true,
                 deep_gemv(kHead, weights_->lm_head(), rows),
                 projection_config(kHead, weights_->lm_head(), c.vocab_size, H, rows));
    });
    return;
  }
  // This rank's columns [rows, vocab_.rows()] into its part of gather_ [world][rows][padded], the
  // all-gather, then each rank's part into its columns of logits_ [rows, V].
  const int world = tp_.comm->world(), N = static_cast<int>(vocab_.rows());
  const size_t part = size_t(rows) * vocab_.padded;
  float* all = gather_.as<float>();
  timed(Profiler::kGemm, [&] {
    gemm_->run(normed_.get(), weights_->lm_head(), all + tp_.comm->rank() * part, rows, N, H, true,
               deep_gemv(kHead, weights_->lm_head(), rows),
               projection_config(kHead, weights_->lm_head(), N, H, rows));
  });
  tp_.comm->all_gather_f32(all, part, stream_);
  for (int r = 0; r < world; ++r) {
    const tp::VocabRange v = tp::vocab_range(c.vocab_size, world, r);
    RILL_CUDA(cudaMemcpy2DAsync(logits_.as<float>() + v.begin, size_t(c.vocab_size) * 4,
                                all + r * part, size_t(v.rows()) * 4, size_t(v.rows()) * 4, rows,
                                cudaMemcpyDeviceToDevice, stream_));
  }
}

void CudaRunner::enqueue_add_norm(kernels::AddNormParams p, const StepPlan& plan, bool gather,
                                  const cuda::DeviceLinear* consumer, int N) {
  const ModelConfig& c = config_;
  p.dtype = weights_->dtype();
  p.type = c.norm == NormKind::kRmsNorm ? kernels::NormType::kRms : kernels::NormType::kLayer;
  p.eps = c.norm_eps;
  p.num_tokens = gather ? plan.shape.logit_rows : plan.shape.tokens;
  p.hidden = c.hidden_size;
  p.residual = x_.as<float>();
  p.rows = gather ? reinterpret_cast<const int32_t*>(dmeta() + plan.layout.rows) : nullptr;
  const int H = c.hidden_size, T = p.num_tokens;
  void* const out0 = p.out0;
  if (consumer && !gather && tuning_.fp8_fused_quant)
    if (const auto in = gemm_->fp8_input(out0, *consumer, T,
                                         gemm_rows(T, plan, out0, *consumer, H), N, H)) {
      p.out0_fp8 = in->x;
      p.out0_scales = in->scales;
      p.out0 = nullptr;  // the GEMM reads only the e4m3 rows
    }
  timed(Profiler::kNorm, [&] { RILL_CUDA(kernels::launch_add_norm(p, stream_)); });
  if (p.out0_fp8) gemm_->prequantized(out0, T);
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

  // The norms inside the fp8 GEMVs around them where both take it (CudaTuning::fp8_norm_in_gemv).
  LayerNorms norms;
  norms.mid = norm_in_gemv(li, T);
  norms.qkv_in = norms.mid && li > 0 && norm_in_gemv(li - 1, T);
  norms.down_out = norms.mid && !last && norm_in_gemv(li + 1, T);
  norms.qkv_paired = norms.qkv_in && pair_down_qkv(T);
  norms.down_paired = norms.down_out && pair_down_qkv(T);
  enqueue_attention(li, plan, norms);
  if (c.parallel_residual) {  // x + attn(ln1(x)) + mlp(ln2(x)): h2_ holds ln2(x)
    enqueue_mlp(li, h2_.get(), plan, norms);
    after.delta0 = o_.get();
    after.bias0 = w.bo;
    after.delta1 = m_.get();
    after.bias1 = w.bdown;
    enqueue_add_norm(after, plan, last, last ? nullptr : &next->wqkv, c.qkv_dim());
    return;
  }
  kernels::AddNormParams mid;
  mid.delta0 = o_.get();
  mid.bias0 = w.bo;
  mid.weight0 = w.mlp_norm;
  mid.norm_bias0 = w.mlp_norm_bias;
  mid.out0 = h_.get();
  if (peer_sum(T)) mid.peers = peer_o_;  // the o all-reduce happens here
  if (!norms.mid)
    enqueue_add_norm(mid, plan, false, &w.wup, c.gated_mlp ? 2 * c.intermediate_size
                                                           : c.intermediate_size);
  enqueue_mlp(li, h_.get(), plan, norms);
  if (norms.down_out) return;
  after.delta0 = m_.get();
  after.bias0 = w.bdown;
  if (peer_sum(T)) after.peers = peer_m_;  // and down's
  enqueue_add_norm(after, plan, last, last ? nullptr : &next->wqkv, c.qkv_dim());
}

// The whole step: embedding, layers, final norm on the logit rows, LM head, sampling (the
// sampling only with `sample`).
void CudaRunner::enqueue_forward(const StepPlan& plan, bool copy_logits, bool sample) {
  const ModelConfig& c = config_;
  const cuda::StepShape& sh = plan.shape;
  const cuda::StepLayout& L = plan.layout;
  const kernels::DType dt = weights_->dtype();
  timed(Profiler::kNorm, [&] {
    kernels::EmbeddingParams e;
    e.dtype = dt;
    e.num_tokens = sh.tokens;
    e.hidden = c.hidden_size;
    e.vocab = static_cast<int>(vocab_.rows());  // a vocabulary-parallel rank: its rows only
    e.vocab_begin = static_cast<int>(vocab_.begin);
    e.table = weights_->embed();
    e.tokens = reinterpret_cast<const int32_t*>(dmeta() + L.tokens);
    e.previous = sampled_.as<int32_t>();  // kLastSampled tokens: the previous step's samples
    e.num_previous = max_rows_;
    e.out = x_.as<float>();
    RILL_CUDA(kernels::launch_embedding(e, stream_));
  });
  enqueue_all_reduce(x_.get(), sh.tokens, true);  // other ranks' tokens: zero rows here
  if (rope_in_attention(plan) || rope_table_this_step(plan))
    timed(Profiler::kNorm, [&] {  // the angles of every layer's RoPE
      kernels::RopeTableParams t;
      t.num_tokens = sh.tokens;
      t.rotary_dim = c.rope.rotary_dim;
      t.positions = reinterpret_cast<const int64_t*>(dmeta() + L.positions);
      t.sink_positions = reinterpret_cast<const int64_t*>(dmeta() + L.sink_positions);
      t.inv_freq = weights_->inv_freq();
      t.table = rope_table_.as<float>();
      RILL_CUDA(kernels::launch_rope_table(t, stream_));
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
  enqueue_add_norm(first, plan, false, &l0.wqkv, c.qkv_dim());
  for (int li = 0; li < c.num_layers; ++li) enqueue_layer(li, plan);
  if (sh.logit_rows == 0) return;
  enqueue_lm_head(sh.logit_rows);
  if (copy_logits)  // before sampling, which edits the logits in place
    RILL_CUDA(cudaMemcpyAsync(logits_host_.get(), logits_.get(), size_t(sh.logit_rows) * c.vocab_size * 4,
                              cudaMemcpyDeviceToHost, stream_));
  if (sh.logprobs)  // so are the raw rows log-probabilities are computed from
    timed(Profiler::kSampling, [&] {
      RILL_CUDA(kernels::launch_copy_logprob_rows(
          sh.sampled, c.vocab_size, reinterpret_cast<const int32_t*>(dmeta() + L.logprobs),
          logits_.as<float>(), logprob_logits_.as<float>(), stream_));
    });
  if (sample) enqueue_sampling(plan);
}

// Samples logits_' sampled rows (in place) under their masks in masks_dev_, then their
// log-probabilities from the raw rows kept above.
void CudaRunner::enqueue_sampling(const StepPlan& plan) {
  const ModelConfig& c = config_;
  const cuda::StepShape& sh = plan.shape;
  const cuda::StepLayout& L = plan.layout;
  if (sh.sampled == 0) return;
  timed(Profiler::kSampling, [&] {
    kernels::SampleBatch s;
    s.num_rows = sh.sampled;
    s.vocab = c.vocab_size;
    s.logits = logits_.as<float>();
    s.rows = reinterpret_cast<const kernels::SamplingRow*>(dmeta() + L.sampling);
    s.output_counts = output_counts_.as<int32_t>();
    s.prompt_mask = prompt_mask_.as<uint8_t>();
    s.out_tokens = sampled_.as<int32_t>();
    s.token_masks = masks_dev_.as<uint32_t>();
    s.mask_words = mask_words_;
    RILL_CUDA(kernels::launch_sample(s, stream_));
  });
  if (sh.logprobs) enqueue_logprobs(plan);
}

// Log-probabilities of the sampled tokens from the raw rows kept before sampling: sampled rows
// with a request -> logprobs_ (downloaded with the sampled tokens).
void CudaRunner::enqueue_logprobs(const StepPlan& plan) {
  timed(Profiler::kSampling, [&] {
    kernels::LogprobsParams p;
    p.num_rows = plan.shape.sampled;
    p.vocab = config_.vocab_size;
    p.max_top = kMaxTopLogprobs;
    p.logits = logprob_logits_.as<float>();
    p.tokens = sampled_.as<int32_t>();
    p.top_n = reinterpret_cast<const int32_t*>(dmeta() + plan.layout.logprobs);
    p.out = logprobs_.as<float>();
    RILL_CUDA(kernels::launch_logprobs(p, stream_));
  });
}

}  // namespace rill
