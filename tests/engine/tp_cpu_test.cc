// Tensor parallelism emulated on the CPU: a model split into N ranks (tp::shard_model, the code
// the CUDA group shards with), each a CpuRunner on its own thread meeting the others in an
// in-process all-reduce / all-gather, equals the unsharded CpuRunner token for token (fp32) for
// N = 2, 4, 8 over GQA ratios, KV heads that divide and that replicate, tied and untied
// embeddings, biases, GPT-NeoX's parallel residual and fp8 checkpoint weights with their scales;
// late grammar masks (ModelRunner::supply_masks) reach every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/fp8_weights.h"
#include "engine/tp/tp_factory.h"
#include "engine/tp/tp_shard.h"
#include "tests/engine/random_model.h"

namespace rill {
namespace {

using testing::random_model;
using testing::tiny_llama_config;

ModelConfig config(int heads, int kv_heads, bool tied) {
  ModelConfig c = tiny_llama_config();
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 8;
  c.rope.rotary_dim = 8;
  c.hidden_size = 40;  // not heads * head_dim: the shapes never assume it
  c.intermediate_size = 64;
  c.vocab_size = 101;  // no N divides it: the last rank's vocabulary rows are fewer
  c.tie_word_embeddings = tied;
  return c;
}

struct Run {
  std::vector<int32_t> tokens;  // greedy continuation
  std::vector<float> logits;    // every prompt position's, then each step's
};

// Prefill of `prompt` (logits of every position) in two chunks, then `steps` greedy decode steps
// beside a second, streaming sequence (a sink + window cache that wraps).
Run generate(ModelRunner& r, const std::vector<int32_t>& prompt, int steps) {
  Run out;
  r.add_sequence({1, CachePolicy::full(), {}});
  r.add_sequence({2, CachePolicy::streaming(2, 6), {}});
  const size_t half = prompt.size() / 2;
  for (auto [begin, end] : {std::pair{size_t{0}, half}, std::pair{half, prompt.size()}}) {
    const std::span<const int32_t> chunk(prompt.data() + begin, end - begin);
    const StepInput in[2] = {{1, chunk, LogitsMode::kAll, end == prompt.size()},
                             {2, chunk, LogitsMode::kNone, end == prompt.size()}};
    const StepOutput o = r.step(in);
    out.logits.insert(out.logits.end(), o.logits.begin(), o.logits.end());
    if (end == prompt.size()) out.tokens.push_back(o.sampled[0]);
  }
  int32_t next2 = 0;
  for (int s = 0; s < steps; ++s) {
    const int32_t t1 = out.tokens.back();
    const StepInput in[2] = {{1, std::span<const int32_t>(&t1, 1), LogitsMode::kLast, true},
                             {2, std::span<const int32_t>(&next2, 1), LogitsMode::kNone, true}};
    const StepOutput o = r.step(in);
    out.logits.insert(out.logits.end(), o.logits.begin(), o.logits.end());
    out.tokens.push_back(o.sampled[0]);
    next2 = o.sampled[1];
  }
  r.remove_sequence(1);
  r.remove_sequence(2);
  return out;
}

std::vector<int32_t> prompt(int n, int vocab) {
  std::mt19937 rng(11);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// The sharded group equals the whole model: the same greedy tokens, logits within fp32 rounding
// of sums taken in another order.
void expect_sharded_equal(const Model& m, int world, const CpuRunnerOptions& opt = {}) {
  SCOPED_TRACE("heads " + std::to_string(m.config.num_heads) + ", kv heads " +
               std::to_string(m.config.num_kv_heads) + ", world " + std::to_string(world));
  const auto p = prompt(9, m.config.vocab_size);
  CpuRunnerOptions one = opt;
  one.num_threads = 1;
  CpuRunner whole(m, one);
  const Run ref = generate(whole, p, 10);
  auto tp = tp::make_cpu_tp_runner(m, world, one);
  EXPECT_EQ(tp->config().num_heads, m.config.num_heads);  // the group reports the whole model
  const Run got = generate(*tp, p, 10);
  EXPECT_EQ(got.tokens, ref.tokens);
  ASSERT_EQ(got.logits.size(), ref.logits.size());
  double worst = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i)
    worst = std::max(worst, std::abs(double(got.logits[i]) - ref.logits[i]));
  EXPECT_LT(worst, 2e-4) << "largest logit difference";
}

TEST(TpCpu, HeadsAndKvHeadsThatDivideAndReplicate) {
  // (heads, kv heads): MHA, GQA 2 and 4, MQA; with 8 ranks kv 2 and 1 replicate, kv 8 divides.
  for (auto [heads, kv] : {std::pair{8, 8}, std::pair{8, 4}, std::pair{8, 2}, std::pair{8, 1}})
    for (int world : {2, 4, 8}) {
      if (tp::tp_unsupported_reason(config(heads, kv, true), world)) continue;
      expect_sharded_equal(random_model(config(heads, kv, world % 2 == 0 && kv % 2 == 0)), world);
    }
}

TEST(TpCpu, TiedAndUntiedEmbeddings) {
  for (bool tied : {true, false})
    for (int world : {2, 4, 8}) expect_sharded_equal(random_model(config(8, 2, tied)), world);
}

TEST(TpCpu, BiasesAndParallelResidual) {
  ModelConfig qwen = config(8, 4, false);  // Qwen2: biases on q, k, v
  qwen.arch = Arch::kQwen2;
  qwen.qkv_bias = true;
  for (int world : {2, 4}) expect_sharded_equal(random_model(qwen), world);
  ModelConfig neox = config(8, 8, false);  // GPT-NeoX: LayerNorm, plain GELU MLP, every bias
  neox.arch = Arch::kGptNeoX;
  neox.norm = NormKind::kLayerNorm;
  neox.act = Activation::kGeluErf;
  neox.gated_mlp = false;
  neox.parallel_residual = true;
  neox.qkv_bias = neox.o_bias = neox.mlp_bias = true;
  neox.rope.rotary_dim = 4;
  for (int world : {2, 8}) expect_sharded_equal(random_model(neox), world);
}

// Every linear weight stored in fp8 with per-channel scales (as an fp8 checkpoint): the scales
// are sliced with their rows and kept whole along the columns.
TEST(TpCpu, Fp8CheckpointWeights) {
  Model m = random_model(config(8, 2, false));
  for (LayerWeights& l : m.weights.layers)
    for (Tensor* t : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      *t = quantize_fp8_per_channel(*t);
  for (int world : {2, 4}) expect_sharded_equal(m, world);
}

// An fp8 KV cache with calibrated per-layer scales (LayerWeights::kv_scales): every rank keeps
// its layer's scales, and the group's logits equal one runner's.
TEST(TpCpu, Fp8KvCacheKeepsTheCalibratedScales) {
  Model m = random_model(config(8, 2, false));
  const CpuRunnerOptions fp8{.num_threads = 1, .kv_cache_dtype = KvCacheDType::kFp8E4M3};
  CpuRunner unscaled(m, fp8);
  const auto plain = generate(unscaled, prompt(9, m.config.vocab_size), 10);
  for (size_t i = 0; i < m.weights.layers.size(); ++i)  // e4m3 saturates K past 448 / 256 = 1.75
    m.weights.layers[i].kv_scales = {.k = 1.0f / 256 + 0.002f * i, .v = 1.0f / 128};
  CpuRunner scaled(m, fp8);
  const auto clipped = generate(scaled, prompt(9, m.config.vocab_size), 10);
  double apart = 0;
  for (size_t i = 0; i < plain.logits.size(); ++i)
    apart = std::max(apart, std::abs(double(plain.logits[i]) - clipped.logits[i]));
  EXPECT_GT(apart, 1e-2) << "the scales must change this model's logits";
  for (int rank : {0, 1})
    for (size_t i = 0; i < m.weights.layers.size(); ++i) {
      const KvScales s = tp::shard_model(m, 2, rank).weights.layers[i].kv_scales;
      EXPECT_EQ(s.k, m.weights.layers[i].kv_scales.k);
      EXPECT_EQ(s.v, m.weights.layers[i].kv_scales.v);
    }
  for (int world : {2, 4}) expect_sharded_equal(m, world, fp8);
}

// A 2-D fp8 weight with scales of `block_rows` x `block_cols`.
Tensor fp8_weight(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols) {
  std::mt19937 rng(5);
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * cols));
  for (auto& b : *bytes) b = static_cast<uint8_t>(rng() % 0x7e);  // finite e4m3, either sign
  for (size_t i = 0; i < bytes->size(); i += 3) (*bytes)[i] |= 0x80;
  auto s = std::make_shared<Fp8Scales>();
  s->name = "w_scale";
  s->rows = rows;
  s->cols = cols;
  s->block_rows = block_rows;
  s->block_cols = block_cols;
  s->values.resize(static_cast<size_t>(s->grid_rows() * s->grid_cols()));
  for (size_t i = 0; i < s->values.size(); ++i) s->values[i] = 0.5f + 0.25f * float(i % 7);
  Tensor t;
  t.name = "w";
  t.dtype = DType::kF8E4M3;
  t.shape = {rows, cols};
  t.data = bytes->data();
  t.owner = bytes;
  t.scales = s;
  return t;
}

// Slices of fp8 weights dequantize to the slices of the dequantized weight, for per-tensor,
// per-channel and 128 x 128 block scales, rows at any offset, columns on block boundaries.
TEST(TpCpu, Fp8SlicesKeepTheirScales) {
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{300, 384}, {1, 384}, {128, 128}}) {
    const Tensor w = fp8_weight(300, 384, br, bc);
    const std::vector<float> full = w.to_f32();
    const Tensor rows = tp::slice_rows(w, 37, 150);
    const std::vector<float> r = rows.to_f32();
    for (int64_t i = 0; i < 150; ++i)
      for (int64_t c = 0; c < 384; ++c)
        ASSERT_EQ(r[static_cast<size_t>(i * 384 + c)],
                  full[static_cast<size_t>((37 + i) * 384 + c)]);
    const Tensor cols = tp::slice_cols(w, 128, 256);
    const std::vector<float> k = cols.to_f32();
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t c = 0; c < 256; ++c)
        ASSERT_EQ(k[static_cast<size_t>(i * 256 + c)],
                  full[static_cast<size_t>(i * 384 + 128 + c)]);
  }
  EXPECT_THROW(tp::slice_cols(fp8_weight(256, 384, 128, 128), 64, 128), Error);
}

TEST(TpCpu, VocabularyRangesCoverTheVocabulary) {
  for (int world : {1, 2, 3, 4, 8}) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      const tp::VocabRange v = tp::vocab_range(101, world, r);
      EXPECT_EQ(v.begin, next);
      EXPECT_GT(v.rows(), 0);
      EXPECT_LE(v.rows(), v.padded);
      next = v.end;
    }
    EXPECT_EQ(next, 101);
  }
}

TEST(TpCpu, RefusesShapesThatDoNotSplit) {
  const auto why = [](ModelConfig c, int world) {
    return tp::tp_unsupported_reason(c, world).value_or("");
  };
  EXPECT_NE(why(config(6, 6, true), 4).find("num_attention_heads (6)"), std::string::npos);
  EXPECT_NE(why(config(24, 6, true), 4).find("num_key_value_heads (6)"), std::string::npos);
  ModelConfig mlp = config(8, 8, true);
  mlp.intermediate_size = 60;
  EXPECT_NE(why(mlp, 8).find("intermediate_size (60)"), std::string::npos);
  EXPECT_NE(why(config(8, 8, true), 16).find("outside [1, 8]"), std::string::npos);
  ModelConfig block = config(8, 8, true);
  block.quant.method = QuantMethod::kFp8;
  block.quant.weights = WeightScaleKind::kBlock;
  block.quant.block_rows = block.quant.block_cols = 128;
  EXPECT_NE(why(block, 2).find("128-column scale blocks"), std::string::npos);
  EXPECT_FALSE(tp::tp_unsupported_reason(config(8, 2, true), 8));  // kv heads replicated
  try {
    tp::make_cpu_tp_runner(random_model(config(6, 6, true)), 4, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// Bad input throws on every rank alike: the group stays usable and in step.
TEST(TpCpu, BadInputLeavesTheGroupUsable) {
  const Model m = random_model(config(8, 2, true));
  auto tp = tp::make_cpu_tp_runner(m, 2, {.num_threads = 1});
  const int32_t bad = 1000;
  tp->add_sequence({1, CachePolicy::full(), {}});
  const StepInput in{1, std::span<const int32_t>(&bad, 1), LogitsMode::kNone, true};
  EXPECT_THROW(tp->step(std::span<const StepInput>(&in, 1)), Error);
  EXPECT_THROW(tp->add_sequence({1, CachePolicy::full(), {}}), Error);  // exists on every rank
  const int32_t ok = 3;
  const StepInput good{1, std::span<const int32_t>(&ok, 1), LogitsMode::kNone, true};
  EXPECT_GE(tp->step(std::span<const StepInput>(&good, 1)).sampled[0], 0);
  EXPECT_EQ(tp->kv().num_free_blocks(), tp->rank(1).kv().num_free_blocks());
}

// Two sequences (greedy, seeded) under a mask of 20 ids, 12 decode steps: masks at launch, one
// step at a time, or (`late`) pipelined as the serving loop drives constrained rows: step s + 1
// launched with kLastSampled and mask_later before step s is finished, its masks supplied after.
std::vector<int32_t> masked_tokens(ModelRunner& r, bool late) {
  const int V = r.config().vocab_size;
  std::vector<uint32_t> mask(static_cast<size_t>(V + 31) / 32, 0);
  std::mt19937 rng(3);
  for (int i = 0; i < 20; ++i) {
    const uint32_t t = rng() % static_cast<uint32_t>(V);
    mask[t >> 5] |= 1u << (t & 31);
  }
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  r.add_sequence({2, CachePolicy::full(), {.temperature = 1.0f, .seed = 4}});
  const auto p = prompt(7, V);
  std::vector<int32_t> out;
  const int32_t last = kLastSampled;
  int32_t next[2] = {0, 0};
  const LateMask masks[2] = {{1, mask}, {2, mask}};
  for (int s = 0; s < 13; ++s) {
    StepInput in[2];
    for (int k = 0; k < 2; ++k) {
      const std::span<const int32_t> tok =
          s == 0 ? std::span<const int32_t>(p)
                 : std::span<const int32_t>(late ? &last : &next[k], 1);
      in[k] = {SeqId(k + 1), tok, LogitsMode::kNone, true};
      if (late && s > 0)
        in[k].mask_later = true;
      else
        in[k].mask = mask;
    }
    if (!late) {
      const StepOutput o = r.step(in);
      for (int k = 0; k < 2; ++k) out.push_back(next[k] = o.sampled[k]);
      continue;
    }
    r.launch(in);
    if (s == 0) continue;
    const StepOutput o = r.finish();
    out.insert(out.end(), o.sampled.begin(), o.sampled.end());
    r.supply_masks(masks);
  }
  if (late) {
    const StepOutput o = r.finish();
    out.insert(out.end(), o.sampled.begin(), o.sampled.end());
  }
  r.remove_sequence(1);
  r.remove_sequence(2);
  for (int32_t t : out) EXPECT_TRUE((mask[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u) << t;
  return out;
}

// The group passes late masks to every rank: each samples what the whole model samples with the
// masks at launch.
TEST(TpCpu, LateMasksSampleAsMasksAtLaunch) {
  const Model m = random_model(config(8, 2, false));
  CpuRunner whole(m, {.num_threads = 1});
  const auto ref = masked_tokens(whole, false);
  EXPECT_EQ(masked_tokens(whole, true), ref);
  auto tp = tp::make_cpu_tp_runner(m, 2, {.num_threads = 1});
  EXPECT_EQ(masked_tokens(*tp, true), ref);
  EXPECT_EQ(tp->kv().num_free_blocks(), tp->rank(1).kv().num_free_blocks());
}

TEST(TpCpu, ChoosesGpus) {
  EXPECT_EQ(tp::choose_gpus({}, 2, 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(tp::choose_gpus({3, 1}, 2, 4), (std::vector<int>{3, 1}));
  EXPECT_THROW(tp::choose_gpus({}, 4, 2), Error);
  EXPECT_THROW(tp::choose_gpus({0}, 2, 4), Error);
  EXPECT_THROW(tp::choose_gpus({0, 0}, 2, 4), Error);
  EXPECT_THROW(tp::choose_gpus({0, 4}, 2, 4), Error);
}

}  // namespace
}  // namespace rill
