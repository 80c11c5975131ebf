// The CPU reference runner: a clear fp32 forward pass over a paged KV cache, batched over
// sequences, multi-threaded over output features and attention heads. The CUDA runner is
// tested against it, and the server uses it when no GPU is present.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/model/dtype.h"
#include "engine/model/model.h"
#include "engine/runner/runner.h"
#include "engine/tp/host_collective.h"
#include "engine/tp/tp_shard.h"
#include "engine/util/thread_pool.h"

namespace rill {

namespace cpu {
struct Fp8ActQuant;  // cpu_runner.cc
}

/// One fp8 layer's W8A8 GEMM in a step, as CpuRunnerOptions::fp8_gemm_rows asks about it.
struct Fp8GemmQuery {
  int64_t rows = 0;      // the step's tokens (the LM head: its logit rows)
  int64_t n = 0, k = 0;  // weights [n, k]
  bool block = false;    // 128-column scales
  bool prefill = false;  // the step carries a prompt chunk (an input of more than one token)
  bool lm_head = false;  // the LM head (quantized by the checkpoint)
};

struct CpuRunnerOptions {
  int num_threads = 0;                   // 0: all cores
  int block_size = 16;                   // tokens per KV block
  int64_t kv_cache_bytes = 256ll << 20;  // pool size; ignored when num_blocks > 0
  int num_blocks = 0;
  int64_t host_kv_cache_bytes = 64ll << 20;  // offloaded caches (ModelRunner::offload_sequence)
  /// kFp8E4M3 emulates the CUDA runner's fp8 cache: every stored K/V value is rounded through
  /// e4m3 with its layer's scales (LayerWeights::kv_scales) and decode tokens attend to their own
  /// K/V as stored (the pool stays fp32).
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  /// kFp8: the decoder's linear weights as the CUDA runner holds them in fp8, dequantized
  /// (16/32-bit ones quantized per channel first); kNone: as stored (fp8 ones dequantized).
  /// Embeddings, norms and the LM head are used as stored either way.
  WeightQuant quantization = WeightQuant::kNone;
  /// >= 0: emulates the CUDA runner's W8A8 GEMMs, which a step of more than this many tokens
  /// takes for its fp8 linear layers (the CUDA runner's fp8_gemv_max_rows): their input is
  /// rounded through e4m3 first, per token with the scale max |x| / 448, per token and 128
  /// columns for block-scaled weights, or with the checkpoint's static input scale
  /// (kernels/src/quantize_fp8.cu). -1: off (the reference: activations stay fp32).
  int fp8_activation_rows = -1;
  /// With fp8_activation_rows >= 0, when set: how many leading rows of a W8A8 GEMM the CUDA
  /// runner quantizes; the others take its weight-only GEMV (cuda::Gemm::fp8_gemm_rows at the
  /// rows the runner runs the GEMM at, cuda::Gemm::padded_rows: it depends on what cuBLASLt
  /// takes). Unset: all of them.
  std::function<int64_t(const Fp8GemmQuery&)> fp8_gemm_rows;
  /// With fp8_activation_rows >= 0, > 0: every emulated activation is first multiplied by
  /// 1 + u * fp8_activation_jitter, u uniform in [-1, 1) from a hash of the seed, the layer's
  /// shape and the element's row and column. e4m3 rounding is discontinuous: the CUDA runner's
  /// activations, which its 16-bit compute moves by a few bf16 ulps from these fp32 ones, round
  /// to another e4m3 neighbour wherever they straddle a rounding boundary. Two runs with
  /// different seeds and a jitter of the size of that compute error measure how far such flips
  /// move the logits (tests/engine/cuda_fp8_test.cc bounds the GPU by it). 0: exact emulation.
  float fp8_activation_jitter = 0;
  uint32_t fp8_activation_jitter_seed = 0;
  /// Tensor parallelism, emulated: this runner is rank `tp_rank` of the group whose ranks meet
  /// in `tp_comm` (one thread each), and its model is that rank's tp::shard_model. It all-reduces
  /// after o and down (adding their biases after the sum), looks up only its vocabulary rows
  /// (all-reducing the embeddings) and all-gathers its logit columns. Null: the whole model.
  std::shared_ptr<tp::HostCollective> tp_comm;
  int tp_rank = 0;
};

class CpuRunner final : public ModelRunner {
 public:
  /// Converts the model's weights to fp32; `model` need not outlive the runner.
  CpuRunner(const Model& model, const CpuRunnerOptions& options = {});
  ~CpuRunner() override;

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { return *kv_; }
  void add_sequence(const SequenceSpec& spec) override;
  void remove_sequence(SeqId id) override;
  void restart_sampling(SeqId id, const SamplingParams& sampling) override;
  int host_kv_blocks() const override { return host_blocks_; }
  int host_kv_blocks_free() const override { return host_blocks_ - host_blocks_used_; }
  void offload_sequence(SeqId id) override;
  void restore_sequence(SeqId id) override;  // copies at once
  bool restore_done(SeqId) override { return true; }
  std::vector<KvTransfer> completed_transfers() override { return std::exchange(transfers_, {}); }
  /// Runs the step at once (the CPU has nothing to overlap); finish() hands its output back.
  void launch(std::span<const StepInput> inputs) override;
  StepOutput finish() override;
  /// Samples the last step's mask_later rows (their logits were computed at launch).
  void supply_masks(std::span<const LateMask> masks) override;
  /// The host time the step finish() last returned took to compute (the serving engine's
  /// step-cost model learns from it).
  double last_step_device_ms() const override { return last_step_ms_; }

 private:
  struct Layer;
  struct SeqState {
    SamplingParams sampling;
    SamplerState sampler;
  };
  struct Chunk;  // one input's slice of the step

  StepOutput run(std::span<const StepInput> inputs);  // inputs without kLastSampled

  void forward_layers(const std::vector<Chunk>& chunks, std::vector<float>& x, int64_t T);
  static void sample_into(StepOutput& out, size_t k, std::span<const float> raw, SeqState& s,
                          std::span<const uint32_t> mask, int logprobs);
  StepOutput logits_and_samples(std::span<const StepInput> inputs, const std::vector<Chunk>& chunks,
                                const std::vector<float>& x);
  void attention(int layer, const Chunk& c, const float* qkv, float* out);
  void write_kv(int layer, const Chunk& c, const float* qkv);
  bool stores_before_attention(const Chunk& c) const;
  void mlp(const Layer& l, const float* h, float* out, int64_t T);
  void norm(const std::vector<float>& w, const std::vector<float>& b, const float* x, float* y, int64_t T) const;
  void copy_blocks(const std::vector<BlockCopy>& copies);  // copy-on-write of shared ring blocks
  float* kv_ptr(int layer, int32_t block, int kv, int head, int offset);
  int64_t block_floats() const;  // one block of one layer: [2][kv_heads][block_size][head_dim]

  // Tensor parallelism (CpuRunnerOptions::tp_comm): the sum over ranks of x [n] (nothing alone),
  // then `bias` [H] added to each of its rows.
  void tp_reduce(float* x, int64_t n, const std::vector<float>& bias) const;

  ModelConfig config_;
  std::shared_ptr<tp::HostCollective> tp_comm_;
  int tp_rank_ = 0;
  tp::VocabRange vocab_;  // the embedding and LM head rows this runner holds
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvCacheManager> kv_;
  std::vector<float> embed_, lm_head_, final_norm_, final_norm_b_, inv_freq_;
  std::vector<Layer> layers_;
  std::unique_ptr<float[]> cache_;  // [layers][blocks][2][kv_heads][block_size][head_dim]
  int num_blocks_ = 0;
  bool fp8_kv_ = false;
  int fp8_act_rows_ = -1;  // CpuRunnerOptions::fp8_activation_rows
  std::function<int64_t(const Fp8GemmQuery&)> fp8_gemm_rows_;
  bool step_prefill_ = false;  // the step being run carries a prompt chunk (Fp8GemmQuery)
  float fp8_jitter_ = 0;  // CpuRunnerOptions::fp8_activation_jitter (and its seed)
  uint32_t fp8_jitter_seed_ = 0;
  // Rounds the leading rows of x [T, K] the CUDA runner's W8A8 GEMM quantizes for an fp8 layer
  // [n, K] (the LM head with `lm_head`) with activation quantization `q`.
  void emulate_w8a8(const cpu::Fp8ActQuant& q, float* x, int64_t T, int64_t n, int64_t K,
                    bool lm_head = false) const;
  // The LM head is fp8 (the checkpoint quantized it; a W8A8 GEMM on CUDA for many rows): with
  // block scales, with a static input scale.
  bool head_fp8_ = false, head_group_ = false;
  float head_static_scale_ = 0;
  std::unordered_map<SeqId, SeqState> seqs_;
  // Offloaded caches: per sequence its blocks' contents, [blocks][layers][block_floats].
  std::unordered_map<SeqId, std::vector<float>> offloaded_;
  int host_blocks_ = 0, host_blocks_used_ = 0;
  std::vector<KvTransfer> transfers_;
  std::deque<StepOutput> finished_;                  // launched, not yet handed back by finish()
  std::deque<double> finished_ms_;                   // their compute times
  double last_step_ms_ = 0;
  std::unordered_map<SeqId, int32_t> last_sampled_;  // tokens sampled by the last launched step
  // The last launched step's (finished_.back()) mask_later rows, until supply_masks samples
  // them: the input's index, its sequence, its logprobs request and its raw logits row [V].
  struct LateRow {
    size_t input = 0;
    SeqId id = 0;
    int logprobs = -1;
    std::vector<float> logits;
  };
  std::vector<LateRow> late_;
};

}  // namespace rill
