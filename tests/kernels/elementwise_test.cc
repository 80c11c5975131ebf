// Embedding, add_norm, activation and kv_write against fp64 CPU references of the same formulas.
// Odd sizes (769, 5125) and offset pointers run the scalar fallbacks; every output sits between
// guard regions and is poisoned (NaN) before the launch, so unwritten elements show up.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/quantize_fp8.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;

const char* dtype_name(DType t) {
  return t == DType::kF16 ? "f16" : "bf16";
}

// ---------------------------------------------------------------------------------------------
// Embedding

// The id the kernel looks up for token t (-1: a zero row): EmbeddingParams' contract.
int32_t embedding_id(int32_t token, const std::vector<int32_t>& previous, bool use_previous) {
  if (token < 0 && use_previous)
    return -1 - token < int32_t(previous.size()) ? previous[-1 - token] : -1;
  return token;
}

TEST(Embedding, GathersRowsAndZeroesOutOfRangeIds) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(1);
  const int vocab = 1000;
  // Tokens sampled by a "previous step", some of them out of range.
  const std::vector<int32_t> previous = {17, vocab - 1, -3, vocab + 2, 0};
  for (DType dt : kDTypes) {
    for (int hidden : {64, 769, 4096, 5125}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool offset_table = variant == 1;  // a misaligned table: the scalar path
        const bool use_previous = variant >= 2;  // negative ids name previous[-1 - id]
        // A vocabulary-parallel shard (tensor parallelism) holding rows [300, 700).
        const int begin = variant == 3 ? 300 : 0, rows = variant == 3 ? 400 : vocab;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " hidden=" + std::to_string(hidden) +
                     " variant=" + std::to_string(variant));
        const std::vector<float> table = rounded_random(size_t(vocab) * hidden, rng, dt);
        std::vector<int32_t> tokens(33);
        for (size_t t = 0; t < tokens.size(); ++t) tokens[t] = int32_t((t * 7919) % vocab);
        tokens[0] = 0, tokens[1] = vocab - 1, tokens[2] = -1, tokens[3] = vocab,
        tokens[4] = 1 << 30;
        for (int i = 0; i < 6; ++i) tokens[5 + i] = -1 - i;  // -6: past the end of previous
        tokens[11] = INT32_MIN;
        const int off = offset_table ? 1 : 0;
        std::vector<float> table_buf(table.size() + off, 0.0f);
        std::copy(table.begin(), table.end(), table_buf.begin() + off);
        DeviceBuffer d_table(table_buf.size(), 2), d_tokens(tokens.size(), 4),
            d_out(tokens.size() * hidden, 4), d_previous(previous.size(), 4);
        d_table.upload_floats(table_buf, dt);
        d_tokens.upload(tokens.data());
        d_previous.upload(previous.data());
        d_out.poison();
        kernels::EmbeddingParams p;
        p.dtype = dt;
        p.num_tokens = int(tokens.size());
        p.hidden = hidden;
        p.vocab = rows;
        p.vocab_begin = begin;
        p.table = d_table.as<uint16_t>() + off + size_t(begin) * hidden;
        p.tokens = d_tokens.as<int32_t>();
        if (use_previous) {
          p.previous = d_previous.as<int32_t>();
          p.num_previous = int(previous.size());
        }
        p.out = d_out.as<float>();
        CUDA_OK(kernels::launch_embedding(p, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_TRUE(d_out.check_guards());
        std::vector<float> want(tokens.size() * hidden, 0.0f);
        int from_previous = 0;
        for (size_t t = 0; t < tokens.size(); ++t) {
          const int32_t id = embedding_id(tokens[t], previous, use_previous);
          from_previous += tokens[t] < 0 && id >= 0 && id < vocab;
          if (id >= begin && id < begin + rows)
            std::copy_n(table.begin() + size_t(id) * hidden, hidden, want.begin() + t * hidden);
        }
        EXPECT_EQ(from_previous, use_previous ? 4 : 0);
        if (variant == 3)
          EXPECT_GT(std::count(want.begin(), want.end(), 0.0f),
                    hidden);  // tokens 2 and 5 (-1), 6 (-2), 9 (-5)
        const std::vector<float> got = d_out.download_floats(dt);
        ASSERT_FALSE(has_nonfinite(got));
        EXPECT_EQ(max_abs_error(got, want), 0.0);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// add_norm

struct AddNormCase {
  kernels::NormType type;
  int hidden, num_tokens, deltas;
  bool biases, norm_bias, two_outputs, gather;
  bool fp8 = false;  // out0 also as e4m3 per token (AddNormParams::out0_fp8)
};

std::string describe(const AddNormCase& c, DType dt) {
  return std::string(dtype_name(dt)) + (c.type == kernels::NormType::kRms ? " rms" : " layer") +
         " hidden=" + std::to_string(c.hidden) + " T=" + std::to_string(c.num_tokens) +
         " deltas=" + std::to_string(c.deltas) + (c.biases ? " biases" : "") +
         (c.norm_bias ? " norm_bias" : "") + (c.two_outputs ? " out1" : "") +
         (c.gather ? " rows" : "") + (c.fp8 ? " fp8" : "");
}

void run_add_norm(const AddNormCase& c, DType dt, std::mt19937& rng) {
  SCOPED_TRACE(describe(c, dt));
  const int H = c.hidden, T = c.num_tokens;
  const int R = c.gather ? T + 5 : T;  // residual rows
  const float eps = 1e-5f;
  std::vector<int32_t> rows(T);
  for (int i = 0; i < T; ++i)
    rows[i] = c.gather ? (i * 7 + 3) % R : i;  // distinct: 7 and R coprime below
  if (c.gather) {
    std::vector<int32_t> sorted = rows;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  }
  std::vector<float> residual = random_vector(size_t(R) * H, rng, 2.0f);
  for (int j = 0; j < H; ++j) residual[j] += 0.5f;  // a non-zero mean for LayerNorm
  std::vector<std::vector<float>> delta(2), bias(2);
  for (int d = 0; d < c.deltas; ++d) {
    delta[d] = rounded_random(size_t(R) * H, rng, dt);  // indexed by the gathered row
    if (c.biases) bias[d] = rounded_random(H, rng, dt, 0.3f);
  }
  std::vector<std::vector<float>> weight(2), norm_bias(2);
  for (int o = 0; o < 2; ++o) {
    weight[o] = round_to(random_vector(H, rng, 0.5f), dt);
    for (float& w : weight[o]) w = from_half_bits(to_half_bits(w + 1.0f, dt), dt);
    if (c.norm_bias) norm_bias[o] = rounded_random(H, rng, dt, 0.2f);
  }

  // Reference: the residual update in fp32 with the kernel's order, the rest in fp64.
  std::vector<float> want_res = residual;
  std::vector<std::vector<float>> want_out(2, std::vector<float>(size_t(T) * H));
  for (int i = 0; i < T; ++i) {
    float* r = want_res.data() + size_t(rows[i]) * H;
    for (int d = 0; d < c.deltas; ++d)
      for (int j = 0; j < H; ++j)
        r[j] += delta[d][size_t(rows[i]) * H + j] + (c.biases ? bias[d][j] : 0.0f);
    double mean = 0, sq = 0;
    if (c.type == kernels::NormType::kLayer) {
      for (int j = 0; j < H; ++j) mean += r[j];
      mean /= H;
    }
    for (int j = 0; j < H; ++j) sq += (r[j] - mean) * (r[j] - mean);
    const double inv = 1.0 / std::sqrt(sq / H + eps);
    for (int o = 0; o < 2; ++o)
      for (int j = 0; j < H; ++j)
        want_out[o][size_t(i) * H + j] =
            float((r[j] - mean) * inv * weight[o][j] + (c.norm_bias ? norm_bias[o][j] : 0.0));
  }
  for (auto& w : want_out) w = round_to(w, dt);

  DeviceBuffer d_res(residual.size(), 4), d_rows(T, 4);
  d_res.upload_floats(residual, dt);
  d_rows.upload(rows.data());
  std::vector<DeviceBuffer*> owned;
  auto upload = [&](const std::vector<float>& v) -> const void* {
    if (v.empty()) return nullptr;
    owned.push_back(new DeviceBuffer(v.size(), 2));
    owned.back()->upload_floats(v, dt);
    return owned.back()->get();
  };
  DeviceBuffer d_out0(size_t(T) * H, 2), d_out1(size_t(T) * H, 2);
  d_out0.poison();
  d_out1.poison();
  kernels::AddNormParams p;
  p.dtype = dt;
  p.type = c.type;
  p.eps = eps;
  p.num_tokens = T;
  p.hidden = H;
  p.residual = d_res.as<float>();
  p.delta0 = upload(delta[0]);
  p.bias0 = upload(bias[0]);
  p.delta1 = upload(delta[1]);
  p.bias1 = upload(bias[1]);
  p.weight0 = upload(weight[0]);
  p.norm_bias0 = upload(norm_bias[0]);
  p.out0 = d_out0.get();
  if (c.two_outputs) {
    p.weight1 = upload(weight[1]);
    p.norm_bias1 = upload(norm_bias[1]);
    p.out1 = d_out1.get();
  }
  p.rows = c.gather ? d_rows.as<int32_t>() : nullptr;
  DeviceBuffer d_q(size_t(T) * H, 1), d_scales(T, 4);
  d_q.poison();
  d_scales.poison();
  if (c.fp8) {
    p.out0_fp8 = d_q.as<uint8_t>();
    p.out0_scales = d_scales.as<float>();
  }
  CUDA_OK(kernels::launch_add_norm(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_res.check_guards());
  EXPECT_TRUE(d_out0.check_guards());
  EXPECT_TRUE(d_out1.check_guards());
  EXPECT_TRUE(d_q.check_guards());
  EXPECT_TRUE(d_scales.check_guards());
  // The same launch with out0 null writes the same e4m3 rows and scales (and no 16-bit rows).
  std::vector<uint8_t> fp8_only(c.fp8 ? size_t(T) * H : 0);
  std::vector<float> fp8_only_scales(c.fp8 ? T : 0);
  if (c.fp8) {
    DeviceBuffer d_res2(residual.size(), 4), d_q2(size_t(T) * H, 1), d_s2(T, 4);
    d_res2.upload_floats(residual, dt);
    d_q2.poison();
    d_s2.poison();
    kernels::AddNormParams q = p;
    q.residual = d_res2.as<float>();
    q.out0 = nullptr;
    q.out0_fp8 = d_q2.as<uint8_t>();
    q.out0_scales = d_s2.as<float>();
    CUDA_OK(kernels::launch_add_norm(q, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(d_q2.check_guards());
    EXPECT_TRUE(d_s2.check_guards());
    d_q2.download(fp8_only.data());
    d_s2.download(fp8_only_scales.data());
  }
  for (DeviceBuffer* b : owned) delete b;
  if (c.fp8) {  // exactly what launch_quantize_fp8 (per token) makes of out0 as stored
    const std::vector<float> out0 = d_out0.download_floats(dt);
    std::vector<uint8_t> got(size_t(T) * H), want(got.size());
    std::vector<float> got_scales(T), want_scales(T);
    d_q.download(got.data());
    d_scales.download(got_scales.data());
    for (int i = 0; i < T; ++i) {
      float amax = 0;
      for (int j = 0; j < H; ++j) amax = std::max(amax, std::abs(out0[size_t(i) * H + j]));
      want_scales[i] = amax > 0 ? amax / 448.0f : 1.0f;
      for (int j = 0; j < H; ++j)
        want[size_t(i) * H + j] = fp8::e4m3_from_float(out0[size_t(i) * H + j] / want_scales[i]);
    }
    EXPECT_EQ(got_scales, want_scales);
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) bad += got[k] != want[k];
    EXPECT_EQ(bad, 0u) << "e4m3 bytes differ from the host encoder's of out0";
    EXPECT_TRUE(fp8_only == got) << "out0 null: other e4m3 bytes";
    EXPECT_EQ(fp8_only_scales, got_scales) << "out0 null";
  }

  const std::vector<float> got_res = d_res.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got_res));
  EXPECT_LE(max_abs_error(got_res, want_res), 0.0) << "residual (same fp32 operations)";
  expect_close(d_out0.download_floats(dt), want_out[0], dt, "out0");
  if (c.two_outputs) expect_close(d_out1.download_floats(dt), want_out[1], dt, "out1");
}

TEST(AddNorm, RmsAndLayerNormOverShapesDeltasAndOutputs) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (DType dt : kDTypes) {
    for (auto type : {kernels::NormType::kRms, kernels::NormType::kLayer}) {
      for (int hidden : {64, 769, 4096, 5125, 8192, 16384}) {
        for (int deltas : {0, 1, 2}) {
          const bool biases = deltas > 0 && hidden != 8192;
          run_add_norm({type, hidden, hidden >= 8192 ? 3 : 33, deltas, biases,
                        type == kernels::NormType::kLayer, deltas == 2, false},
                       dt, rng);
        }
      }
    }
  }
}

TEST(AddNorm, RowsGatherUpdatesOnlyTheGatheredResidualRows) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (DType dt : kDTypes) {
    for (int hidden : {769, 4096}) {
      for (int T : {1, 3, 33}) {
        run_add_norm({kernels::NormType::kRms, hidden, T, 1, true, false, false, true}, dt, rng);
        run_add_norm({kernels::NormType::kLayer, hidden, T, 2, false, true, true, true}, dt, rng);
      }
    }
  }
}

// The W8A8 GEMMs' input written by the norm that produces it: the bytes and scales the per-token
// quantization kernel would write for out0, with deltas, a second output and a row gather.
TEST(AddNorm, Fp8OutputIsOut0QuantizedPerToken) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (DType dt : kDTypes)
    for (int hidden : {64, 136, 4096, 5120, 16384})
      for (const bool gather : {false, true})
        run_add_norm({kernels::NormType::kRms, hidden, hidden >= 8192 ? 3 : 17, 1, true, false,
                      !gather, gather, true},
                     dt, rng);
}

TEST(AddNorm, RejectsBadArguments) {
  kernels::AddNormParams p;
  p.num_tokens = 1;
  p.hidden = 64;
  EXPECT_EQ(kernels::launch_add_norm(p, nullptr),
            cudaErrorInvalidValue);  // no residual / weight / out
  float dummy[64];
  p.residual = dummy;
  p.weight0 = dummy;
  p.out0 = dummy;
  p.hidden = 16385;
  EXPECT_EQ(kernels::launch_add_norm(p, nullptr), cudaErrorInvalidValue);
  p.hidden = 64;
  p.bias0 = dummy;  // a bias without its delta
  EXPECT_EQ(kernels::launch_add_norm(p, nullptr), cudaErrorInvalidValue);
  p.bias0 = nullptr;
  p.out0_fp8 = reinterpret_cast<uint8_t*>(dummy);  // without its scales
  EXPECT_EQ(kernels::launch_add_norm(p, nullptr), cudaErrorInvalidValue);
  p.out0_scales = dummy;
  p.hidden = 60;  // not a multiple of 8
  EXPECT_EQ(kernels::launch_add_norm(p, nullptr), cudaErrorInvalidValue);
}

// ---------------------------------------------------------------------------------------------
// Activation

double ref_activation(kernels::ActKind kind, double x) {
  switch (kind) {
    case kernels::ActKind::kGeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case kernels::ActKind::kGeluTanh:
      return 0.5 * x *
             (1.0 +
              std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    default:
      return x / (1.0 + std::exp(-x));
  }
}

TEST(Activation, SiluMulAndGeluMatchTorchFormulas) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(4);
  const kernels::ActKind kinds[] = {kernels::ActKind::kSiluMul, kernels::ActKind::kGeluErf,
                                    kernels::ActKind::kGeluTanh};
  for (DType dt : kDTypes) {
    for (auto kind : kinds) {
      for (int width : {769, 4096, 11008}) {
        for (int T : {1, 3, 33}) {
          for (bool with_bias : {false, true}) {
            for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 in place, 2 interleaved gate|up
              const bool gated = kind == kernels::ActKind::kSiluMul;
              const bool in_place = mode == 1, interleaved = mode == 2;
              if (in_place && gated) continue;  // only gelu may run in place
              if (interleaved && (!gated || width % 8 != 0)) continue;
              SCOPED_TRACE(std::string(dtype_name(dt)) + " kind=" + std::to_string(int(kind)) +
                           " width=" + std::to_string(width) + " T=" + std::to_string(T) +
                           (with_bias ? " bias" : "") + (in_place ? " in-place" : "") +
                           (interleaved ? " interleaved" : ""));
              const int in_w = gated ? 2 * width : width;
              const std::vector<float> in = rounded_random(size_t(T) * in_w, rng, dt, 3.0f);
              const std::vector<float> bias =
                  with_bias ? rounded_random(in_w, rng, dt, 0.5f) : std::vector<float>();
              std::vector<float> want(size_t(T) * width);
              for (int t = 0; t < T; ++t) {
                for (int i = 0; i < width; ++i) {
                  // Gate (or the only input) column of element i, and its up column.
                  const int gi = interleaved ? (i / 8) * 16 + i % 8 : i;
                  const int ui = interleaved ? gi + 8 : width + i;
                  const float x = in[size_t(t) * in_w + gi] + (with_bias ? bias[gi] : 0.0f);
                  double y = ref_activation(kind, x);
                  if (gated) y *= double(in[size_t(t) * in_w + ui] + (with_bias ? bias[ui] : 0.0f));
                  want[size_t(t) * width + i] = float(y);
                }
              }
              want = round_to(want, dt);
              DeviceBuffer d_in(in.size(), 2), d_bias(std::max<size_t>(bias.size(), 1), 2),
                  d_out(want.size(), 2);
              d_in.upload_floats(in, dt);
              if (with_bias) d_bias.upload_floats(bias, dt);
              d_out.poison();
              kernels::ActivationParams p;
              p.dtype = dt;
              p.kind = kind;
              p.num_tokens = T;
              p.width = width;
              p.in = d_in.get();
              p.bias = with_bias ? d_bias.get() : nullptr;
              p.out = in_place ? d_in.get() : d_out.get();
              p.interleaved = interleaved;
              CUDA_OK(kernels::launch_activation(p, nullptr));
              CUDA_OK(cudaDeviceSynchronize());
              EXPECT_TRUE(d_in.check_guards());
              EXPECT_TRUE(d_out.check_guards());
              expect_close((in_place ? d_in : d_out).download_floats(dt), want, dt, "activation");
            }
          }
        }
      }
    }
  }
}

// The W8A8 down projection's input written by the activation itself (ActivationParams::out_fp8):
// the T rows of the plain launch, and the bytes and scales launch_quantize_fp8 (per token) makes
// of them, with and without the T rows, over kinds, widths up to the limit, layouts and biases.
TEST(Activation, Fp8OutputIsTheOutputQuantizedPerToken) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(6);
  const kernels::ActKind kinds[] = {kernels::ActKind::kSiluMul, kernels::ActKind::kGeluTanh};
  for (DType dt : kDTypes)
    for (auto kind : kinds)
      for (int width : {64, 1000, 11008, 14336, kernels::kActivationFp8MaxWidth})
        for (int mode = 0; mode < 3; ++mode)  // 0 plain, 1 bias, 2 interleaved gate|up
          // few rows (1,024 threads a row) and many (256 threads a row)
          for (int T : {width > 8192 ? 3 : 9, width == 1000 ? 1100 : 0}) {
            const bool gated = kind == kernels::ActKind::kSiluMul;
            if ((mode == 2 && !gated) || T == 0) continue;
            const int in_w = gated ? 2 * width : width;
            SCOPED_TRACE(std::string(dtype_name(dt)) + " kind=" + std::to_string(int(kind)) +
                         " width=" + std::to_string(width) + " mode=" + std::to_string(mode) +
                         " T=" + std::to_string(T));
            const std::vector<float> in = rounded_random(size_t(T) * in_w, rng, dt, 3.0f);
            const std::vector<float> bias =
                mode == 1 ? rounded_random(in_w, rng, dt, 0.5f) : std::vector<float>();
            DeviceBuffer d_in(in.size(), 2), d_bias(std::max<size_t>(bias.size(), 1), 2),
                d_want(size_t(T) * width, 2), d_out(size_t(T) * width, 2),
                d_want_q(size_t(T) * width, 1), d_q(size_t(T) * width, 1), d_want_s(T, 4),
                d_s(T, 4);
            d_in.upload_floats(in, dt);
            if (!bias.empty()) d_bias.upload_floats(bias, dt);
            kernels::ActivationParams p;
            p.dtype = dt;
            p.kind = kind;
            p.num_tokens = T;
            p.width = width;
            p.in = d_in.get();
            p.bias = bias.empty() ? nullptr : d_bias.get();
            p.out = d_want.get();
            p.interleaved = mode == 2;
            CUDA_OK(kernels::launch_activation(p, nullptr));
            kernels::QuantizeFp8Params q;
            q.dtype = dt;
            q.num_tokens = T;
            q.width = width;
            q.x = d_want.get();
            q.out = d_want_q.as<uint8_t>();
            q.scales = d_want_s.as<float>();
            CUDA_OK(kernels::launch_quantize_fp8(q, nullptr));
            auto bytes = [](const DeviceBuffer& b) {
              std::vector<uint8_t> v(b.bytes());
              b.download(v.data());
              return v;
            };
            for (bool with_out : {true, false}) {
              d_out.poison();
              d_q.poison();
              d_s.poison();
              kernels::ActivationParams f = p;
              f.out = with_out ? d_out.get() : nullptr;
              f.out_fp8 = d_q.as<uint8_t>();
              f.out_scales = d_s.as<float>();
              CUDA_OK(kernels::launch_activation(f, nullptr));
              CUDA_OK(cudaDeviceSynchronize());
              EXPECT_TRUE(d_out.check_guards());
              EXPECT_TRUE(d_q.check_guards());
              EXPECT_TRUE(d_s.check_guards());
              if (with_out) {
                EXPECT_TRUE(bytes(d_out) == bytes(d_want)) << "the T rows";
              }
              EXPECT_TRUE(bytes(d_q) == bytes(d_want_q)) << "e4m3 bytes, out " << with_out;
              EXPECT_TRUE(bytes(d_s) == bytes(d_want_s)) << "scales, out " << with_out;
            }
          }
}

TEST(Activation, Fp8OutputRejectsWhatItCannotTake) {
  alignas(16) static uint16_t buf[64];
  float scales[1];
  kernels::ActivationParams p;
  p.num_tokens = 1;
  p.width = 16;
  p.in = buf;
  p.out_fp8 = reinterpret_cast<uint8_t*>(buf);
  EXPECT_EQ(kernels::launch_activation(p, nullptr), cudaErrorInvalidValue);  // no scales
  p.out_scales = scales;
  p.width = 12;  // not a multiple of 8
  EXPECT_EQ(kernels::launch_activation(p, nullptr), cudaErrorInvalidValue);
  p.width = kernels::kActivationFp8MaxWidth + 8;
  EXPECT_EQ(kernels::launch_activation(p, nullptr), cudaErrorInvalidValue);
}

// ---------------------------------------------------------------------------------------------
// kv_write

// launch_kv_write of T tokens with `stride`-element qkv rows into `cache`, then a sync.
cudaError_t kv_write(DType dt, const kernels::KvCacheLayout& layout, int T, int num_heads,
                     int stride, DeviceBuffer& qkv, DeviceBuffer& slots, DeviceBuffer& cache) {
  kernels::KvWriteParams p;
  p.dtype = dt;
  p.num_tokens = T;
  p.num_heads = num_heads;
  p.num_kv_heads = layout.num_kv_heads;
  p.head_dim = layout.head_dim;
  p.qkv = qkv.get();
  p.qkv_stride = stride;
  p.cache_slot = slots.as<int32_t>();
  p.cache = cache.get();
  p.layout = layout;
  if (cudaError_t err = kernels::launch_kv_write(p, nullptr); err != cudaSuccess) return err;
  return cudaDeviceSynchronize();
}

TEST(KvWrite, ScattersKAndVToTheirSlotsAndSkipsNegativeSlots) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int num_heads = 4, num_kv_heads = 2, T = 33;
  for (DType dt : kDTypes) {
    for (int head_dim : {64, 128, 80, 66}) {
      for (int extra_stride : {0, 3}) {  // 3: an odd row stride, the scalar path
        SCOPED_TRACE(std::string(dtype_name(dt)) + " head_dim=" + std::to_string(head_dim) +
                     " extra_stride=" + std::to_string(extra_stride));
        kernels::KvCacheLayout layout;
        layout.num_blocks = 7;
        layout.num_kv_heads = num_kv_heads;
        layout.block_size = 16;
        layout.head_dim = head_dim;
        const int stride = (num_heads + 2 * num_kv_heads) * head_dim + extra_stride;
        const std::vector<float> qkv = rounded_random(size_t(T) * stride, rng, dt);
        std::vector<float> cache = rounded_random(size_t(layout.layer_stride()), rng, dt);
        // Distinct scattered slots, every fourth token skipped.
        std::vector<int32_t> slots(T);
        for (int t = 0; t < T; ++t)
          slots[t] = t % 4 == 3 ? -1 : (t * 37 + 5) % (layout.num_blocks * layout.block_size);
        std::vector<float> want = cache;
        for (int t = 0; t < T; ++t) {
          if (slots[t] < 0) continue;
          const int b = slots[t] / layout.block_size, o = slots[t] % layout.block_size;
          for (int g = 0; g < num_kv_heads; ++g) {
            for (int d = 0; d < head_dim; ++d) {
              const size_t k_at = size_t(b) * layout.block_stride() +
                                  (size_t(g) * layout.block_size + o) * head_dim + d;
              want[k_at] = qkv[size_t(t) * stride + (num_heads + g) * head_dim + d];
              want[k_at + layout.kv_stride()] =
                  qkv[size_t(t) * stride + (num_heads + num_kv_heads + g) * head_dim + d];
            }
          }
        }
        DeviceBuffer d_qkv(qkv.size(), 2), d_slots(T, 4), d_cache(cache.size(), 2);
        d_qkv.upload_floats(qkv, dt);
        d_slots.upload(slots.data());
        d_cache.upload_floats(cache, dt);
        CUDA_OK(kv_write(dt, layout, T, num_heads, stride, d_qkv, d_slots, d_cache));
        EXPECT_TRUE(d_cache.check_guards());
        const std::vector<float> got = d_cache.download_floats(dt);
        ASSERT_FALSE(has_nonfinite(got));
        EXPECT_EQ(max_abs_error(got, want), 0.0);
      }
    }
  }
}

// An fp8 cache: each element e4m3(x / scale) with the K or V scale, bit-exact against the host
// encoder, every other byte untouched.
TEST(KvWrite, QuantizesIntoAnFp8CacheBitExact) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(6);
  const int num_heads = 4, num_kv_heads = 2, T = 33;
  for (DType dt : kDTypes) {
    for (int head_dim : {64, 128, 80, 66}) {
      for (int extra_stride : {0, 3}) {  // 3: the scalar path
        for (const auto& [k_scale, v_scale] :
             {std::pair{1.0f, 1.0f}, std::pair{0.37f, 1.0f / 128}}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " head_dim=" + std::to_string(head_dim) +
                       " extra_stride=" + std::to_string(extra_stride) + " k_scale=" +
                       std::to_string(k_scale) + " v_scale=" + std::to_string(v_scale));
          kernels::KvCacheLayout layout;
          layout.num_blocks = 7;
          layout.num_kv_heads = num_kv_heads;
          layout.block_size = 16;
          layout.head_dim = head_dim;
          layout.cache_dtype = kernels::KvDType::kFp8E4M3;
          layout.k_scale = k_scale;
          layout.v_scale = v_scale;  // 1/128: values beyond 3.5 saturate
          const int stride = (num_heads + 2 * num_kv_heads) * head_dim + extra_stride;
          const std::vector<float> qkv = rounded_random(size_t(T) * stride, rng, dt);
          std::vector<uint8_t> cache(size_t(layout.layer_stride()));
          for (auto& b : cache) b = static_cast<uint8_t>(rng() & 0x77);  // finite e4m3 bytes
          std::vector<int32_t> slots(T);
          for (int t = 0; t < T; ++t)
            slots[t] = t % 4 == 3 ? -1 : (t * 37 + 5) % (layout.num_blocks * layout.block_size);
          std::vector<uint8_t> want = cache;
          for (int t = 0; t < T; ++t) {
            if (slots[t] < 0) continue;
            const int b = slots[t] / layout.block_size, o = slots[t] % layout.block_size;
            for (int g = 0; g < num_kv_heads; ++g)
              for (int d = 0; d < head_dim; ++d) {
                const size_t k_at = size_t(b) * layout.block_stride() +
                                    (size_t(g) * layout.block_size + o) * head_dim + d;
                const size_t row = size_t(t) * stride;
                want[k_at] =
                    fp8::e4m3_from_float(qkv[row + (num_heads + g) * head_dim + d] / k_scale);
                want[k_at + layout.kv_stride()] = fp8::e4m3_from_float(
                    qkv[row + (num_heads + num_kv_heads + g) * head_dim + d] / v_scale);
              }
          }
          DeviceBuffer d_qkv(qkv.size(), 2), d_slots(T, 4), d_cache(cache.size(), 1);
          d_qkv.upload_floats(qkv, dt);
          d_slots.upload(slots.data());
          d_cache.upload(cache.data());
          CUDA_OK(kv_write(dt, layout, T, num_heads, stride, d_qkv, d_slots, d_cache));
          EXPECT_TRUE(d_cache.check_guards());
          std::vector<uint8_t> got(cache.size());
          d_cache.download(got.data());
          size_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
          EXPECT_EQ(bad, 0u) << "bytes differing from the host encoder";
        }
      }
    }
  }
}

TEST(KvWrite, RejectsBadFp8Scales) {
  int64_t dummy[4] = {};  // host addresses: rejected before any launch
  kernels::KvWriteParams p;
  p.num_tokens = 1;
  p.num_heads = p.num_kv_heads = 1;
  p.head_dim = 64;
  p.qkv = dummy;
  p.qkv_stride = 3 * 64;
  p.cache_slot = reinterpret_cast<const int32_t*>(dummy);
  p.cache = dummy;
  p.layout.num_blocks = 1;
  p.layout.num_kv_heads = 1;
  p.layout.head_dim = 64;
  p.layout.cache_dtype = kernels::KvDType::kFp8E4M3;
  p.layout.v_scale = 0.0f;
  EXPECT_EQ(kernels::launch_kv_write(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("v_scale"), std::string::npos);
}

}  // namespace
}  // namespace rill::testing
