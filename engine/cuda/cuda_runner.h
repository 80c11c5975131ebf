// The CUDA model runner: weights resident in fp16/bf16, cuBLAS GEMMs with fused QKV and
// gate/up projections, Rill's kernels for everything else, a paged KV pool sized from free GPU
// memory, sampling on the GPU, and decode steps replayed as CUDA graphs per batch-size bucket.
// Per step only token ids, positions, cache slots / block tables and sampling rows go to the
// device, and only sampled tokens (with log-probabilities and logits when asked for) come back.
#pragma once

#include <bit>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/cuda/collective.h"
#include "engine/cuda/cuda_tuning.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/cuda_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/step_meta.h"
#include "engine/model/model.h"
#include "engine/runner/engine_options.h"
#include "engine/runner/runner.h"
#include "engine/tp/host_collective.h"
#include "engine/tp/peer_group.h"
#include "engine/tp/tp_shard.h"
#include "rill/kernels/attention.h"
#include "rill/kernels/elementwise.h"

namespace rill {

/// Number of visible CUDA devices.
int cuda_device_count();

/// Per-category GPU time of eagerly launched steps (rill-bench's breakdown).
struct StepProfile {
  double gemm_ms = 0, attention_ms = 0, norm_elementwise_ms = 0, sampling_ms = 0, total_ms = 0;
  int steps = 0;
};

/// A CudaRunner that is one rank of a tensor-parallel group (engine/tp/): its model is the rank's
/// tp::shard_model, it all-reduces the outputs of o and down (and the embeddings) over `comm`,
/// gathers the logit columns of every rank before sampling (so every rank samples the same
/// tokens) and sizes its KV pool to the group's smallest over `host`.
struct CudaTpRank {
  std::shared_ptr<cuda::Collective> comm;  // on this rank's GPU
  std::shared_ptr<tp::HostCollective> host;
  std::shared_ptr<tp::PeerGroup> peers;  // null: NCCL for every all-reduce
};

class CudaRunner final : public ModelRunner {
 public:
  CudaRunner(const Model& model, const EngineOptions& options);
  /// Rank `tp.comm->rank()` of a tensor-parallel group over `shard` (a size-1 group too).
  CudaRunner(const Model& shard, const EngineOptions& options, CudaTpRank tp);
  ~CudaRunner() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { return *kv_; }
  void add_sequence(const SequenceSpec& spec) override;
  void remove_sequence(SeqId id) override;
  // Sessions (cuda_sessions.cc).
  void restart_sampling(SeqId id, const SamplingParams& sampling) override;
  int host_kv_blocks() const override;
  int host_kv_blocks_free() const override;
  int releasing_blocks() const override { return offloading_blocks_; }
  void offload_sequence(SeqId id) override;
  void restore_sequence(SeqId id) override;
  bool restore_done(SeqId id) override;
  std::vector<KvTransfer> completed_transfers() override;
  /// Queues the step on the GPU and returns: with a second step in flight, the GPU runs the two
  /// back to back while the host prepares the next (kLastSampled feeds tokens on the device).
  /// A step that returns logits may not be launched while another that returns logits is in
  /// flight, nor anything while a profiled step is.
  void launch(std::span<const StepInput> inputs) override;
  StepOutput finish() override;
  /// A step with mask_later rows was queued up to its logits (the forward pass, graph-replayed
  /// for decode buckets); this stages their masks and queues the mask upload, the sampling
  /// kernel and the step's downloads behind it, without waiting for the GPU.
  void supply_masks(std::span<const LateMask> masks) override;

  // Introspection for rill-bench and tests.
  kernels::DType dtype() const { return weights_->dtype(); }
  size_t weight_bytes() const { return weights_->bytes(); }
  size_t kv_pool_bytes() const { return cache_.bytes(); }
  /// Bytes of one cached K or V element: 2 (the model's dtype), or 1 with an fp8 cache.
  int kv_element_bytes() const { return static_cast<int>(layout_.element_bytes()); }
  /// The tuning in effect (EngineOptions::cuda_tuning at construction).
  const CudaTuning& tuning() const { return tuning_; }
  /// Replaces the whole tuning (validated first: kInvalidArgument leaves the runner as it was)
  /// and drops the captured CUDA graphs, so later steps launch what it says.
  void set_tuning(const CudaTuning& tuning);
  /// While enabled, eager steps record CUDA events per op category into `profile()`
  /// (graph replays are not broken down).
  void set_profiling(bool on);
  /// Stops recording and keeps what was recorded in profile().
  void profile_snapshot_and_stop();
  const StepProfile& profile() const { return profile_; }
  /// While on (the default: the serving engine's step-cost model reads it), each step records
  /// CUDA events from its first upload to its last download (graphs stay on); last_step_gpu_ms()
  /// is that span, so wall time minus it is time on the host.
  void set_step_timing(bool on) { step_timing_ = on; }
  double last_step_gpu_ms() const { return last_step_gpu_ms_; }
  double last_step_device_ms() const override { return step_timing_ ? last_step_gpu_ms_ : 0; }
  int max_step_sequences() const override { return max_batch_; }
  int max_step_tokens() const override { return max_tokens_; }
  int prefill_token_granularity() const override;
  int decode_bucket(int batch) const;  // the CUDA-graph batch size a decode batch runs at (0: eager)

 private:
  struct SeqInfo {
    cuda::SamplingSlot sampling;
  };
  // What a launched step leaves for finish(): its plan and which host-side buffers it uses.
  struct InFlight {
    cuda::StepPlan plan;
    int buffer = 0;
    bool timed = false;  // begin event recorded (step timing on at launch)
    bool empty = false;  // no inputs: nothing was queued
    std::vector<SeqId> ids;  // per input
    int mask_rows = 0;       // constrained rows with masks at launch (uploaded with the step)
    // mask_later rows (StepInput::mask_later): their sequences, and their mask rows (after the
    // mask_rows ones). Non-empty while supply_masks is due: the sampling and the downloads are
    // not queued yet.
    std::vector<SeqId> late_ids;
    std::vector<int32_t> late_mask_rows;
  };
  // Host-side buffers, one set per step in flight: the next step's metadata is written while the
  // previous step's may still be waiting for its upload, and the previous step's tokens are still
  // to be read while the next step downloads its own.
  struct HostBuffers {
    cuda::PinnedMemory meta, sampled;
    cuda::PinnedMemory logprobs;  // [max_batch, kLogprobsWidth] (logprobs_)
    cuda::PinnedMemory masks;     // [max_batch, mask_words_] grammar masks of constrained rows
    cuda::Event begin, end;  // around the step's copies and kernels; finish() waits for `end`
  };
  class Profiler;

  static void check_tuning(const CudaTuning& t);  // throws kInvalidArgument
  void apply_tuning();  // tuning_'s settings that live outside the runner (Gemm, kernels)
  void allocate_buffers();
  void size_kv_pool(double memory_fraction);
  void allocate_host_kv(int64_t bytes);  // the pinned pool for offloaded caches
  // One block, all layers, on `stream`.
  void copy_block(int32_t pool_block, int32_t host_block, cudaMemcpyKind kind, cudaStream_t stream);
  void copy_pool_block(int32_t src, int32_t dst);  // pool -> pool, all layers, on stream_
  void wait_for_restore(SeqId id);  // later work on stream_ follows the sequence's restore copy
  void forget_offloaded(SeqId id);       // frees an offloaded sequence's host blocks
  void warm_up();
  // cuBLAS chooses (and loads) its kernels the first time it meets a GEMM shape: 1-20 ms of host
  // time per new token count, during which an eager step's GPU waits for its next launch
  // (rill-launch-queue-bench); cuBLASLt's fp8 plans (heuristic and kernel loading) alike. Steps
  // with prefill therefore round their GEMMs' rows up to a multiple of row_bucket_
  // (gemm_rows, cuda::Gemm::padded_rows; the extra rows are scratch no kernel reads), 16-bit and
  // W8A8 fp8 GEMMs alike, and warm_up_gemms meets every such shape, and every LM-head row count,
  // at start.
  static constexpr int kGemmRowBucket = 64;
  // The bucket of models with block-scaled (128 x 128) fp8 weights: cuBLASLt 13.1 on H100 ran
  // their VEC128_32F GEMM at M = 128 but had no algorithm for M = 33, and 128 is the row count
  // it was seen to take (64 was never measured); a multiple of 128 is either taken whole or
  // rounded down by Fp8Gemm::rows to nothing, and the fp8 GEMV takes the real rows it leaves.
  static constexpr int kFp8BlockGemmRowBucket = 128;
  // The rows of a step's GEMM over w (x [T, K]): cuda::Gemm::padded_rows with row_bucket_.
  int gemm_rows(int T, const cuda::StepPlan& plan, const void* x, const cuda::DeviceLinear& w,
                int K) const;
  void warm_up_gemms();
  // The step up to its logits (embedding, layers, LM head, the logits copies), then, when
  // `sample`, enqueue_sampling.
  void enqueue_forward(const cuda::StepPlan& plan, bool copy_logits, bool sample = true);
  // The sampling kernel and the log-probabilities of the step's sampled rows.
  void enqueue_sampling(const cuda::StepPlan& plan);
  // After the sampling: the downloads of the sampled tokens (and log-probabilities) and the
  // step's end event.
  void enqueue_downloads(const cuda::StepPlan& plan, HostBuffers& h);
  // After the step's synchronisation: the sampled tokens and logits rows of each input (and the
  // sampling steps of the sequences that sampled).
  StepOutput collect_outputs(const cuda::StepPlan& plan, const HostBuffers& h) const;
  // Log-probabilities of the sampled rows that asked (rows past the LM head and the sampler).
  void enqueue_logprobs(const cuda::StepPlan& plan);
  // Validates the step and appends its tokens to the caches; returns each input's first position.
  std::vector<int64_t> admit(std::span<const StepInput> inputs, bool& any_logits);
  // After admit(): block copies, the step's metadata and its enqueue (f.plan, f.ids).
  void plan_and_enqueue(std::span<const StepInput> inputs, const std::vector<int64_t>& starts,
                        bool any_logits, InFlight& f);
  // Enqueues uploads, the graph or eager kernels and the downloads of a planned step.
  // `mask_rows`: grammar masks staged in h.masks (uploaded before the step's kernels). With
  // `late` (mask_later rows) it stops after the forward pass: supply_masks queues the rest.
  void enqueue_step(std::span<const StepInput> inputs, const cuda::StepPlan& plan, int bucket,
                    int mask_rows, bool late, HostBuffers& h);
  void enqueue_layer(int layer, const cuda::StepPlan& plan);
  // Parts of a layer: QKV projection, RoPE + KV write, attention and output projection (into o_);
  // the MLP of `in` (into m_); a residual add + norm whose operands `p` names (the rest is filled
  // in here; `gather` keeps only the logit rows).
  // `norms` says which of the layer's norms run inside its fp8 GEMVs (norm_in_gemv).
  struct LayerNorms {
    bool qkv_in = false;        // qkv reads the previous layer's down output as Fp8NormIn
    bool mid = false;           // o writes the MLP norm's input (Fp8NormOut), gate|up reads it
    bool down_out = false;      // down writes the next layer's attention norm's input
    bool qkv_paired = false;    // qkv_in, and qkv ran in the previous layer's down launch
    bool down_paired = false;   // down_out, and the next layer's qkv runs in down's launch
  };
  void enqueue_attention(int layer, const cuda::StepPlan& plan, const LayerNorms& norms);
  void enqueue_mlp(int layer, const void* in, const cuda::StepPlan& plan, const LayerNorms& norms);
  // CudaTuning::fp8_norm_in_gemv for layer `layer` at T tokens: RMSNorm, sequential residual, one
  // GPU, no o / down bias, every projection through the fp8 GEMV and gate|up with SiLU-and-mul.
  bool norm_in_gemv(int layer, int T) const;
  // An fp8 decode GEMV of projection `projection` with the norm split around it: `norm_in` (x is
  // an Fp8NormOut's y), `norm_weight` (non-null: Fp8NormOut into y with that weight).
  void gemv_fp8_with_norms(const void* x, const cuda::DeviceLinear& w, void* y, int T, int N,
                           int K, int projection, bool norm_in, const void* norm_weight);
  kernels::Fp8GemvParams fp8_norm_gemv_params(const void* x, const cuda::DeviceLinear& w, void* y,
                                              int T, int N, int K, int projection, bool norm_in,
                                              const void* norm_weight) const;
  // CudaTuning::fp8_pair_down_qkv at T tokens (where both layers take the norms in their GEMVs).
  bool pair_down_qkv(int T) const;
  // `consumer` (with its output width N): the linear layer that reads out0 next, whose W8A8 GEMM
  // then takes out0 quantized by the norm, in place of out0 (CudaTuning::fp8_fused_quant).
  void enqueue_add_norm(kernels::AddNormParams p, const cuda::StepPlan& plan, bool gather,
                        const cuda::DeviceLinear* consumer = nullptr, int N = 0);
  // Tensor parallelism: the sum over the ranks of buf [T, H] (activations in the model dtype, or
  // the fp32 residual stream); nothing without a group.
  void enqueue_all_reduce(void* buf, int T, bool f32);
  // True when a step of T tokens sums o and down over peer memory inside the residual adds
  // (kernels::PeerSum; peer_o_, peer_m_) instead of NCCL all-reduces after them.
  bool peer_sum(int T) const {
    return tp_.peers && !config_.parallel_residual && config_.hidden_size % 8 == 0 &&
           int64_t{T} * (tp_.peers->world() - 1) <= tuning_.peer_sum_max_tokens;
  }
  // The LM head over normed_ into logits_ [R, V]: this rank's columns, gathered from every rank
  // with tensor parallelism.
  void enqueue_lm_head(int rows);
  // Runs fn, between CUDA events of Profiler category `category` while profiling.
  template <typename Fn>
  void timed(int category, Fn&& fn);
  // `layout`: layout_ with the layer's KV-cache scales.
  void enqueue_decode_attention(const cuda::StepPlan& plan, void* layer_cache,
                                const kernels::KvCacheLayout& layout, const void* bias);
  void enqueue_prefill_attention(const cuda::StepPlan& plan, void* layer_cache,
                                 const kernels::KvCacheLayout& layout);
  int attention_splits(int decode_seqs, int max_keys) const;  // decode attention's split count
  void quiesce_group(int key);  // tensor-parallel ranks before a graph capture
  // The decode graph of a bucket's step; `sample`: with the sampling kernel (else the forward
  // pass only, for steps whose masks come later).
  cudaGraphExec_t graph_for(int bucket, const cuda::StepPlan& plan, bool sample);
  void
  precapture_graphs();  // every (bucket, split count) graph now (CudaTuning::precapture_graphs)
  void drop_graphs();  // after a change that alters what a step launches
  const char* dmeta() const { return meta_dev_.as<const char>(); }

  static constexpr int kMaxSplits = 16;
  // Fewest keys a split of decode attention takes: small enough that a batch-1 step over a few
  // hundred keys still spreads over all SMs (the kernel is latency-bound there), large enough
  // that the merge stays cheap.
  static constexpr int kMinKeysPerSplit = 64;
  static constexpr int kOneSplitKeys = 256;  // no split up to this many keys (attention_splits)

  ModelConfig config_;
  EngineOptions options_;
  CudaTpRank tp_;         // comm null: not tensor-parallel
  kernels::PeerSum peer_o_, peer_m_;  // with tp_.peers: the fused all-reduces of o_ and m_
  tp::VocabRange vocab_;  // the embedding and LM head rows this runner holds
  bool step_timing_ = true;
  double last_step_gpu_ms_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::DeviceWeights> weights_;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::string cache_identity_;  // seeds the prefix cache's hash chains (cache_identity.h)
  std::unique_ptr<KvCacheManager> kv_;
  kernels::KvCacheLayout layout_;
  int num_sms_ = 0;
  int max_tokens_ = 0, max_batch_ = 0, max_rows_ = 0, max_blocks_ = 0;
  // Steps with prefill round their GEMMs' rows up to a multiple of this: kFp8BlockGemmRowBucket
  // when some layer has block-scaled fp8 weights, else kGemmRowBucket (prefill_token_granularity).
  int row_bucket_ = kGemmRowBucket;
  int gemm_rows_cap_ = 0;  // rows of the GEMM activation buffers: max_tokens_ rounded up to a bucket
  size_t meta_bytes_ = 0;  // a step's packed metadata at most (the biggest step's layout)
  int32_t trash_block_ = 0;
  CudaTuning tuning_;  // see set_tuning
  static constexpr int kQkv = CudaTuning::kQkv, kO = CudaTuning::kO, kUp = CudaTuning::kUp,
                       kDown = CudaTuning::kDown, kHead = CudaTuning::kHead;
  // The CTA shape of a decode projection's GEMV over [N, K] weights at T tokens: the one
  // CudaTuning::projection_gemv_config forces, else the measured ring depth (-1: Gemm's choice).
  int projection_config(int projection, int N, int K, int T) const;
  // The same for weight w: fp8 weights take CudaTuning::fp8_projection_gemv_config.
  int projection_config(int projection, const cuda::DeviceLinear& w, int N, int K, int T) const {
    return w.fp8() ? tuning_.fp8_projection_gemv_config[CudaTuning::projection_index(projection)]
                   : projection_config(projection, N, K, T);
  }
  bool deep_gemv(int projection) const { return (tuning_.gemv_deep_mask & projection) != 0; }
  // The same for fp8 weights at T tokens (CudaTuning::fp8_gemv_deep_mask).
  bool fp8_deep_gemv(int projection, int T) const {
    if (tuning_.fp8_gemv_deep_mask >= 0) return (tuning_.fp8_gemv_deep_mask & projection) != 0;
    (void)T;  // every step size: measured best at batch 1 (H100, 7B: 3.037 ms against 3.231 ms
              // with o and gate|up only, 3.320 ms with none)
    return projection != kHead;
  }
  // deep_gemv or fp8_deep_gemv, as weight w takes.
  bool deep_gemv(int projection, const cuda::DeviceLinear& w, int T) const {
    return w.fp8() ? fp8_deep_gemv(projection, T) : deep_gemv(projection);
  }
  // RoPE inside decode attention (CudaTuning::rope_in_attention). The kAuto rule, from H100
  // measurements (docs/performance-history.md, ninth and thirty-first sessions), only when
  // attention runs in several splits (with one, the rotation lengthens each CTA's long critical
  // path: 7B fp8 4 + 252 lost 0.05 ms):
  //   - models without GQA (the CUDA-core kernel): Llama-2-7B batch 1 @ 515 gained 0.02-0.04 ms,
  //     batch 8 0.05-0.07 ms;
  //   - GQA groups the tensor-core kernel takes, at 1 or 2 sequences: Llama-3-8B fp8 batch 1
  //     gained 0.03-0.05 ms, batch 2 0.02-0.04 (bf16 batch 1 within noise); past 2 the fp8
  //     steps gained 0.02-0.04 ms or nothing, and bf16 batch 8 lost 0.06, so they keep rope_kv
  //     (performance.md F27);
  //   - other GQA groups run the CUDA-core kernel, where Llama-3-8B lost 0.04-0.16 ms.
  bool rope_fusable_ = false;  // the kernel takes this model's shapes (set at construction)
  // RoPE inside decode attention this step: decode rows only.
  bool rope_in_attention(const cuda::StepPlan& plan) const {
    if (!rope_fusable_ || plan.shape.prefill > 0) return false;
    if (tuning_.rope_in_attention != RopeInAttention::kAuto)
      return tuning_.rope_in_attention == RopeInAttention::kOn;
    if (attention_splits(plan.shape.decode, plan.max_decode_keys) <= 1) return false;
    if (config_.num_kv_heads == config_.num_heads) return true;
    return plan.shape.decode <= kRopeInMmaAttentionMaxSeqs && tuning_.decode_mma != 0 &&
           kernels::decode_mma_supported(config_.num_heads, config_.num_kv_heads,
                                         config_.head_dim);
  }
  static constexpr int kRopeInMmaAttentionMaxSeqs = 2;

  // rope_kv reads the step's angles from rope_table_ (kernels::RopeKvParams::table): steps with
  // prefill, where its CTAs would redo each token's angles in every layer (at 2,048 tokens that
  // made rope_kv move 1.3 TB/s); decode steps compute them before the PDL wait, hidden.
  bool rope_table_this_step(const cuda::StepPlan& plan) const {
    return plan.shape.prefill > 0 && config_.rope.rotary_dim > 0;
  }

  // Activations, sized for the largest step.
  cuda::DeviceMemory x_;        // [T, H] fp32 residual stream
  cuda::DeviceMemory h_, h2_;   // [T, H] normed inputs (h2: GPT-NeoX's MLP branch)
  cuda::DeviceMemory qkv_;      // [T, qkv_dim]
  cuda::DeviceMemory q_sink_;   // [T, q_dim]
  cuda::DeviceMemory rope_table_;  // [T, 4, rotary_dim / 2] (rope_in_attention, rope_table_this_step)
  cuda::DeviceMemory attn_;     // [T, q_dim]
  cuda::DeviceMemory o_;        // [T, H]
  cuda::DeviceMemory up_;       // [T, 2I] (gated) or [T, I]
  cuda::DeviceMemory act_;      // [T, I]
  cuda::DeviceMemory m_;        // [T, H]
  cuda::DeviceMemory pair_barrier_;  // kernels::launch_gemv_fp8_pair's grid barrier
  cuda::DeviceMemory norm_sumsq_;  // [kFp8GemvMaxRows, H / 16] fp32: Fp8NormOut's sums of squares
  cuda::DeviceMemory normed_;   // [R, H]
  cuda::DeviceMemory logits_;   // [R, V] fp32
  cuda::DeviceMemory gather_;   // tensor parallelism: [world][R][vocab_.padded] fp32
  cuda::DeviceMemory sampled_;  // [R] int32
  // Log-probabilities (StepInput::logprobs): the raw logits of the sampled rows that ask, kept
  // before the sampler edits logits_ in place, and the kernel's compact output rows.
  cuda::DeviceMemory logprob_logits_;  // [max_batch, V] fp32
  cuda::DeviceMemory logprobs_;        // [max_batch, kLogprobsWidth] fp32
  static constexpr int kLogprobsWidth = 1 + 2 * kMaxTopLogprobs;  // kernels::LogprobsParams::out
  cuda::DeviceMemory attn_ws_;  // decode attention split workspace
  cuda::DeviceMemory
      cache_;  // [layers][blocks + 1][2][kv_heads][block_size][head_dim], fp16/bf16 or e4m3
  cuda::DeviceMemory output_counts_;  // [max_batch, V] int32 penalty state
  cuda::DeviceMemory prompt_mask_;    // [max_batch, V] uint8
  std::vector<int32_t> free_state_slots_;
  cuda::DeviceMemory meta_dev_;
  // Grammar masks of a step's constrained rows, [max_batch, mask_words_] uint32, uploaded with
  // the step (stream order: like meta_dev_, one buffer serves every step). The sampling kernel
  // always points at it (so captured graphs serve constrained and unconstrained batches alike);
  // rows with SamplingRow::mask_row -1 never read it, and a step without constrained rows copies
  // nothing.
  cuda::DeviceMemory masks_dev_;
  int mask_words_ = 0;  // ceil(vocab / 32)
  cuda::PinnedMemory logits_host_;
  HostBuffers host_[kMaxStepsInFlight];
  std::deque<InFlight> in_flight_;  // launched steps, oldest first
  int next_buffer_ = 0;             // host_ set of the next launch

  // Offloaded caches: pinned [host blocks][layers][block bytes], and each sequence's host blocks
  // in logical order.
  cuda::PinnedMemory host_kv_;
  std::unique_ptr<BlockAllocator> host_kv_alloc_;
  std::unordered_map<SeqId, std::vector<int32_t>> offloaded_;
  struct PendingTransfer {  // copies queued on the stream between two events
    KvTransfer info;
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  std::deque<PendingTransfer> transfers_;
  PendingTransfer begin_transfer(bool restore, int blocks, cudaStream_t stream);
  void end_transfer(PendingTransfer t, cudaStream_t stream);
  // Restores copy on their own stream, beside the steps: after the steps launched before them
  // (which may still use the pool blocks they take), before any step that carries the sequence.
  cudaStream_t copy_stream_ = nullptr;
  struct Restoring {
    cudaEvent_t done = nullptr;   // the copy's end on copy_stream_
    std::vector<int32_t> host;    // its host blocks, freed once the copy has read them
  };
  std::unordered_map<SeqId, Restoring> restoring_;
  // CudaTuning::async_offload: offloads copying on copy_stream_ whose sequences still hold their
  // pool blocks (released in order as the copies end: release_offloaded).
  struct Offloading {
    SeqId id = 0;
    int blocks = 0;
    cudaEvent_t done = nullptr;  // the copy's end on copy_stream_
  };
  std::deque<Offloading> offloading_;
  int offloading_blocks_ = 0;
  void release_offloaded();        // releases the blocks of the offloads whose copies ended
  bool keep_offloading(SeqId id);  // a restore of an offload still copying: keeps its blocks
  void drop_offloading(SeqId id);  // a removal: later steps wait for the copy's reads

  std::unordered_map<SeqId, SeqInfo> seqs_;
  // Row of sampled_ holding each sequence's token from the last launched step (kLastSampled).
  std::unordered_map<SeqId, int> last_rows_;
  std::map<int, cudaGraphExec_t> graphs_;
  std::map<int, cuda::StepShape> graph_shapes_;
  std::unique_ptr<Profiler> profiler_;
  StepProfile profile_;
};

}  // namespace rill
