// The CUDA runner's support rules and make_runner's device policy, on the CPU: a model whose shapes
// the CUDA kernels do not take is refused at load ("cuda") or runs on the CPU ("auto", with the
// reason), never accepted and failed at its first request.
#include <gtest/gtest.h>

#include <string>

#include "engine/cuda/cuda_support.h"
#include "engine/error.h"
#include "engine/runner_factory.h"
#include "tests/engine/random_model.h"

namespace rill {
namespace {

using testing::random_model;
using testing::tiny_llama_config;

// A llama2.c-sized model: head_dim 8 (dim 32, 4 heads).
ModelConfig head_dim_8() {
  ModelConfig c = tiny_llama_config();
  c.hidden_size = 32;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 8;
  c.rope.rotary_dim = 8;
  return c;
}

// Pythia-2.8B's attention shape, small: GPT-NeoX, head_dim 80, 25% rotary (20 dims).
ModelConfig neox_head_dim_80() {
  ModelConfig c = tiny_llama_config();
  c.architecture = "GPTNeoXForCausalLM";
  c.arch = Arch::kGptNeoX;
  c.hidden_size = 160;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.head_dim = 80;
  c.rope.rotary_dim = 20;
  c.norm = NormKind::kLayerNorm;
  c.act = Activation::kGeluErf;
  c.gated_mlp = false;
  c.parallel_residual = true;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  return c;
}

// Phi-3-mini's head_dim with GQA.
ModelConfig llama_head_dim_96() {
  ModelConfig c = tiny_llama_config();
  c.hidden_size = 192;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 96;
  c.rope.rotary_dim = 96;
  return c;
}

// `what` names the model's value and the supported set.
void expect_reason(const ModelConfig& c, const std::string& value, const std::string& supported,
                   DType dtype = DType::kF16, KvCacheDType kv = KvCacheDType::kAuto) {
  const auto why = cuda_unsupported_reason(c, dtype, kv);
  ASSERT_TRUE(why.has_value()) << value;
  EXPECT_NE(why->find(value), std::string::npos) << *why;
  EXPECT_NE(why->find(supported), std::string::npos) << *why;
}

TEST(CudaSupport, RejectsHeadDim8NamingTheSupportedSet) {
  expect_reason(head_dim_8(), "head_dim=8", "supported: 64, 80, 96, 128");
  for (int d : {16, 32, 72, 112, 256}) {
    ModelConfig c = llama_head_dim_96();
    c.head_dim = c.rope.rotary_dim = d;
    expect_reason(c, "head_dim=" + std::to_string(d), "64, 80, 96, 128");
  }
}

TEST(CudaSupport, AcceptsEveryKernelHeadDim) {
  for (DType t : {DType::kF16, DType::kBF16})
    for (KvCacheDType kv : {KvCacheDType::kAuto, KvCacheDType::kFp8E4M3}) {
      EXPECT_EQ(cuda_unsupported_reason(neox_head_dim_80(), t, kv), std::nullopt);
      EXPECT_EQ(cuda_unsupported_reason(llama_head_dim_96(), t, kv), std::nullopt);
      for (int d : {64, 128}) {
        ModelConfig c = llama_head_dim_96();
        c.head_dim = c.rope.rotary_dim = d;
        EXPECT_EQ(cuda_unsupported_reason(c, t, kv), std::nullopt) << d;
      }
    }
  std::vector<int> dims(cuda_supported_head_dims().begin(), cuda_supported_head_dims().end());
  EXPECT_EQ(dims, (std::vector<int>{64, 80, 96, 128}));
}

TEST(CudaSupport, RejectsOtherShapesAndTypesTheKernelsDoNotTake) {
  ModelConfig c = llama_head_dim_96();
  c.hidden_size = 16384 + 8;
  expect_reason(c, "hidden_size=16392", "1 .. 16384");
  c = llama_head_dim_96();
  c.vocab_size = 1 << 24;
  expect_reason(c, "vocab_size=16777216", "1 .. 16777215");
  c = llama_head_dim_96();
  c.act = Activation::kGeluTanh;  // gated
  expect_reason(c, "gated MLP with hidden_act=gelu_tanh", "supported: silu");
  c = neox_head_dim_80();
  c.act = Activation::kSilu;  // not gated
  expect_reason(c, "non-gated MLP with hidden_act=silu", "gelu");
  c = llama_head_dim_96();
  c.num_heads = 6;
  c.num_kv_heads = 4;
  expect_reason(c, "num_attention_heads=6, num_key_value_heads=4", "whole GQA groups");
  c = neox_head_dim_80();
  c.rope.rotary_dim = 82;
  expect_reason(c, "rotary_dim=82", "even, 0 .. head_dim=80");
  expect_reason(llama_head_dim_96(), "compute dtype float32", "float16, bfloat16", DType::kF32);
}

TEST(CudaSupport, ComputeDtypeFollowsTheCheckpoint) {
  EXPECT_EQ(cuda_compute_dtype("auto", DType::kBF16), DType::kBF16);
  EXPECT_EQ(cuda_compute_dtype("auto", DType::kF16), DType::kF16);
  EXPECT_EQ(cuda_compute_dtype("auto", DType::kF32), DType::kF16);
  EXPECT_EQ(cuda_compute_dtype("bf16", DType::kF32), DType::kBF16);
  EXPECT_EQ(cuda_compute_dtype("float16", DType::kBF16), DType::kF16);
  try {
    cuda_compute_dtype("float32", DType::kF32);
    ADD_FAILURE() << "float32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

EngineOptions on(const std::string& device) {
  EngineOptions o;
  o.device = device;
  return o;
}

ErrorCode code_of(const ModelConfig& c, const EngineOptions& o, bool cuda_present) {
  try {
    choose_device(c, o, cuda_present);
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::kInternal;
}

TEST(DevicePolicy, AutoFallsBackToTheCpuWithTheReason) {
  const DeviceChoice d = choose_device(head_dim_8(), on("auto"), /*cuda_present=*/true);
  EXPECT_FALSE(d.cuda);
  EXPECT_NE(d.fallback_reason.find("head_dim=8"), std::string::npos) << d.fallback_reason;
  // No device: the CPU, and nothing to explain.
  const DeviceChoice none = choose_device(head_dim_8(), on("auto"), false);
  EXPECT_FALSE(none.cuda);
  EXPECT_TRUE(none.fallback_reason.empty());
  // A supported model takes the GPU when there is one.
  EXPECT_TRUE(choose_device(neox_head_dim_80(), on("auto"), true).cuda);
  EXPECT_TRUE(choose_device(llama_head_dim_96(), on("cuda"), true).cuda);
  EXPECT_FALSE(choose_device(llama_head_dim_96(), on("cpu"), true).cuda);
  EXPECT_FALSE(choose_device(llama_head_dim_96(), on("auto"), false).cuda);
}

TEST(DevicePolicy, CudaIsAnErrorAtLoadForAModelItCannotRun) {
  EXPECT_EQ(code_of(head_dim_8(), on("cuda"), true), ErrorCode::kUnsupported);
  try {
    choose_device(head_dim_8(), on("cuda"), true);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim=8 (supported: 64, 80, 96, 128)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(code_of(llama_head_dim_96(), on("cuda"), false), ErrorCode::kUnsupported);
  EXPECT_EQ(code_of(llama_head_dim_96(), on("tpu"), true), ErrorCode::kInvalidArgument);
  EngineOptions bad_dtype = on("auto");
  bad_dtype.dtype = "float8";
  EXPECT_EQ(code_of(llama_head_dim_96(), bad_dtype, true), ErrorCode::kInvalidArgument);
  EngineOptions fp8 = on("cuda");
  fp8.kv_cache_dtype = "fp8";
  EXPECT_TRUE(choose_device(neox_head_dim_80(), fp8, true).cuda);
}

// make_runner itself: a head_dim 8 model runs on the CPU with --device auto whether or not a GPU
// is present, and --device cuda refuses it at load.
TEST(DevicePolicy, MakeRunnerRunsAnUnsupportedModelOnTheCpu) {
  const Model m = random_model(head_dim_8());
  const auto r = make_runner(m, on("auto"));
  EXPECT_EQ(r->name(), "cpu");
  r->add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  const int32_t prompt[3] = {1, 2, 3};
  StepInput in{1, std::span<const int32_t>(prompt, 3), LogitsMode::kNone, true};
  EXPECT_GE(r->step(std::span<const StepInput>(&in, 1)).sampled[0], 0);
  try {
    make_runner(m, on("cuda"));
    ADD_FAILURE() << "--device cuda accepted a head_dim 8 model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

// With a GPU: a supported model of a new head_dim gets the CUDA runner from "auto".
TEST(DevicePolicy, MakeRunnerTakesTheGpuForHeadDim80) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU part of the device policy skipped";
  EngineOptions o = on("auto");
  o.gpu_memory_fraction = 0.1;
  o.max_batch = 4;
  o.max_step_tokens = 256;
  const auto r = make_runner(random_model(neox_head_dim_80()), o);
  EXPECT_EQ(r->name(), "cuda");
}

}  // namespace
}  // namespace rill
