// The fp8 image the CUDA runner uploads for a fused weight (engine/cuda/fp8_image.h): every
// element dequantizes to exactly what the CPU reference computes with (the parts' dequantized
// values, concatenated or interleaved), for every scale layout and their mixtures.
#include <gtest/gtest.h>

#include <random>

#include "engine/cuda/fp8_image.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/model.h"
#include "tests/engine/checkpoint_writer.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using cuda::build_fp8_image;
using cuda::Fp8Image;
using testing::error_of;

Tensor random_tensor(const std::string& name, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.2f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = d(rng);
  return make_f32_tensor(name, {rows, cols}, std::move(v));
}

// An fp8 tensor with 128 x 128 block scales (block values 2^-k, distinct per block).
Tensor block_tensor(const std::string& name, int64_t rows, int64_t cols, uint32_t seed) {
  Tensor q = quantize_fp8_per_channel(random_tensor(name, rows, cols, seed));
  auto s = std::make_shared<Fp8Scales>();
  s->name = name + "_scale_inv";
  s->rows = rows;
  s->cols = cols;
  s->block_rows = s->block_cols = 128;
  for (int64_t i = 0; i < s->grid_rows() * s->grid_cols(); ++i)
    s->values.push_back(std::ldexp(1.0f, -int(i % 7) - 3));
  q.scales = std::move(s);
  return q;
}

// The rows of `parts` dequantized, in image order.
std::vector<float> expected_rows(const std::vector<const Tensor*>& parts, int tile) {
  std::vector<std::vector<float>> rows;
  for (const Tensor* t : parts) {
    if (!t->present()) continue;
    const std::vector<float> v = is_fp8(*t) ? t->to_f32() : quantize_fp8_per_channel(*t).to_f32();
    for (int64_t r = 0; r < t->shape[0]; ++r)
      rows.emplace_back(v.begin() + r * t->shape[1], v.begin() + (r + 1) * t->shape[1]);
  }
  if (tile > 0) {
    const size_t half = rows.size() / 2;
    std::vector<std::vector<float>> out(rows.size());
    for (size_t r = 0; r < half; ++r) {
      out[(r / tile) * 2 * tile + r % tile] = rows[r];
      out[(r / tile) * 2 * tile + r % tile + tile] = rows[half + r];
    }
    rows = std::move(out);
  }
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return flat;
}

void expect_image(const std::vector<const Tensor*>& parts, int tile, bool block) {
  const Fp8Image img = build_fp8_image(parts, tile);
  EXPECT_EQ(img.block, block);
  const std::vector<float> want = expected_rows(parts, tile);
  ASSERT_EQ(want.size(), size_t(img.rows * img.cols));
  for (int64_t r = 0; r < img.rows; ++r)
    for (int64_t c = 0; c < img.cols; ++c)
      ASSERT_EQ(img.value(r, c), want[r * img.cols + c]) << "row " << r << " col " << c;
  const auto shape = cuda::fp8_image_shape(parts);
  EXPECT_EQ(shape.rows, img.rows);
  EXPECT_EQ(shape.block, img.block);
  EXPECT_EQ(shape.scale_count(), img.scales.size());
}

TEST(Fp8Image, PerRowPartsConcatenate) {
  const Tensor q = random_tensor("q", 48, 256, 1), k = random_tensor("k", 16, 256, 2);
  const Tensor v = quantize_fp8_per_channel(random_tensor("v", 16, 256, 3));
  expect_image({&q, &k, &v}, 0, false);
  const Fp8Image img = build_fp8_image({&q, &k, &v});
  EXPECT_EQ(img.input_scale, 0.0f);  // dynamic
}

TEST(Fp8Image, BlockScalesPerRowAndColumnBlock) {
  const Tensor g = block_tensor("gate", 160, 384, 4), u = block_tensor("up", 160, 384, 5);
  expect_image({&g}, 0, true);
  expect_image({&g, &u}, 8, true);  // the gate | up tiles of the fused SiLU GEMV
  // A per-channel part beside a block-scaled one repeats its scale over the column blocks.
  const Tensor k = random_tensor("k", 64, 384, 6);
  expect_image({&g, &k}, 0, true);
  // Partial blocks: 300 columns (3 blocks, the last of 44), 70 rows.
  const Tensor odd = block_tensor("odd", 70, 300, 7);
  expect_image({&odd, &odd}, 0, true);
}

TEST(Fp8Image, FixtureWeightsAndStaticInputScales) {
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    SCOPED_TRACE(name);
    const Model m = load_model(testing::source_path(std::string("tests/fixtures/") + name));
    const LayerWeights& l = m.weights.layers[0];
    const bool block = std::string(name) == "fp8_block";
    expect_image({&l.q, &l.k, &l.v}, 0, false);  // hidden 128: one column block
    expect_image({&l.gate, &l.up}, 8, false);
    expect_image({&l.down}, 0, block);  // 256 columns: two blocks
    const Fp8Image qkv = build_fp8_image({&l.q, &l.k, &l.v});
    EXPECT_EQ(qkv.input_scale,
              std::string(name) == "fp8_ct_tensor" ? l.q.scales->input_scale : 0.0f);
  }
}

TEST(Fp8Image, RefusesWhatItCannotFuse) {
  const Tensor a = random_tensor("a", 8, 64, 1), b = random_tensor("b", 8, 32, 2);
  EXPECT_NE(error_of([&] {
              build_fp8_image({&a, &b});
            }).find("cannot fuse 'b'"),
            std::string::npos);
  const Tensor c = random_tensor("c", 12, 64, 3);
  EXPECT_NE(error_of([&] {
              build_fp8_image({&a, &c}, 8);
            }).find("two parts of equal rows"),
            std::string::npos);
  Tensor odd = quantize_fp8_per_channel(random_tensor("odd", 8, 256, 4));
  auto s = std::make_shared<Fp8Scales>(*odd.scales);
  s->block_rows = s->block_cols = 64;
  s->values.assign(static_cast<size_t>(s->grid_rows() * s->grid_cols()), 1.0f);
  odd.scales = s;
  EXPECT_NE(
      error_of([&] { build_fp8_image({&odd}); }).find("blocks of 64 columns (supported: 128)"),
      std::string::npos);
}

}  // namespace
}  // namespace rill
