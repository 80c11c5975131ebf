// Activation quantization for the W8A8 GEMMs (rill/kernels/quantize_fp8.h) against the host
// encoder (engine/model/fp8.h): scales are exactly max |x| / 448 per token or per 128-column
// group (or the static scale), and every byte is e4m3(x / scale) bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/quantize_fp8.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::ActQuantMode;
using kernels::DType;

void check(DType dt, int tokens, int width, ActQuantMode mode, float static_scale,
           std::mt19937& rng) {
  SCOPED_TRACE(std::string(dt == DType::kF16 ? "f16" : "bf16") +
               " tokens=" + std::to_string(tokens) + " width=" + std::to_string(width) +
               (mode == ActQuantMode::kPerToken ? " per-token" : " per-group") +
               (static_scale > 0 ? " static" : ""));
  std::vector<float> x = rounded_random(size_t(tokens) * width, rng, dt, 6.0f);
  if (tokens > 1) std::fill_n(x.begin() + width, width, 0.0f);  // a row of zeros: scale 1
  const int groups = (width + 127) / 128;
  const int per = mode == ActQuantMode::kPerToken ? 1 : groups;
  std::vector<float> want_scale(size_t(per) * tokens);
  std::vector<uint8_t> want(x.size());
  for (int t = 0; t < tokens; ++t)
    for (int g = 0; g < per; ++g) {
      const int c0 = mode == ActQuantMode::kPerToken ? 0 : g * 128;
      const int c1 = mode == ActQuantMode::kPerToken ? width : std::min(width, c0 + 128);
      float amax = 0;
      for (int c = c0; c < c1; ++c) amax = std::max(amax, std::abs(x[size_t(t) * width + c]));
      const float s = static_scale > 0 ? static_scale : amax > 0 ? amax / 448.0f : 1.0f;
      want_scale[size_t(g) * tokens + t] = s;
      for (int c = c0; c < c1; ++c)
        want[size_t(t) * width + c] = fp8::e4m3_from_float(x[size_t(t) * width + c] / s);
    }
  DeviceBuffer d_x(x.size(), 2), d_out(x.size(), 1), d_scales(want_scale.size(), 4), d_static(1, 4);
  d_x.upload_floats(x, dt);
  d_out.poison();
  d_scales.poison();
  d_static.upload(&static_scale);
  kernels::QuantizeFp8Params p;
  p.dtype = dt;
  p.num_tokens = tokens;
  p.width = width;
  p.x = d_x.get();
  p.out = d_out.as<uint8_t>();
  p.scales = d_scales.as<float>();
  p.mode = mode;
  p.static_scale = static_scale > 0 ? d_static.as<float>() : nullptr;
  CUDA_OK(kernels::launch_quantize_fp8(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_scales.check_guards());
  std::vector<uint8_t> got(x.size());
  std::vector<float> got_scale(want_scale.size());
  d_out.download(got.data());
  d_scales.download(got_scale.data());
  EXPECT_EQ(got_scale, want_scale);
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  EXPECT_EQ(bad, 0u) << "bytes differ from the host encoder";
}

TEST(QuantizeFp8, PerTokenAndPerGroupMatchTheHostEncoder) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(61);
  for (DType dt : kDTypes)
    for (ActQuantMode mode : {ActQuantMode::kPerToken, ActQuantMode::kPerGroup128})
      for (const auto& [tokens, width] :
           {std::pair{1, 8}, {3, 136}, {17, 4096}, {64, 11008}, {5, 14336}, {2, 392},
            {3, 16384}, {2, 20480}})  // the last: wider than the registers hold (two passes)
        check(dt, tokens, width, mode, 0.0f, rng);
}

TEST(QuantizeFp8, StaticScaleSaturates) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(62);
  for (DType dt : kDTypes) {
    check(dt, 9, 4096, ActQuantMode::kPerToken, 16.0f / 448, rng);  // no saturation
    check(dt, 4, 256, ActQuantMode::kPerToken, 1.0f / 448, rng);    // |x| > 1 saturates at 448
  }
}

TEST(QuantizeFp8, RejectsWhatItCannotDo) {
  kernels::QuantizeFp8Params p;
  p.num_tokens = 1;
  p.width = 12;
  EXPECT_EQ(kernels::launch_quantize_fp8(p, nullptr), cudaErrorInvalidValue);
  p.width = 16;
  p.mode = ActQuantMode::kPerGroup128;
  p.static_scale = reinterpret_cast<const float*>(&p);
  EXPECT_EQ(kernels::launch_quantize_fp8(p, nullptr), cudaErrorInvalidValue);
  p.static_scale = nullptr;
  EXPECT_EQ(kernels::launch_quantize_fp8(p, nullptr), cudaErrorInvalidValue);  // null operands
}

}  // namespace
}  // namespace rill::testing
