#include "engine/cuda/fp8_image.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"
#include "engine/model/fp8.h"
#include "engine/model/fp8_weights.h"

namespace rill::cuda {
namespace {

constexpr int64_t kBlockCols = 128;  // kernels::kFp8ScaleBlock (plain C++: no kernel header here)

[[noreturn]] void invalid(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "fp8 weights: " + what);
}

// A part in fp8 with its scales expanded to one row of blocks per weight row.
struct Part {
  Tensor t;
  Fp8Scales s;
};

}  // namespace

float Fp8Image::value(int64_t r, int64_t c) const {
  const float s = block ? scales[static_cast<size_t>((c / kBlockCols) * rows + r)] : scales[r];
  return fp8::e4m3_to_float(bytes[static_cast<size_t>(r * cols + c)]) * s;
}

Fp8ImageShape fp8_image_shape(const std::vector<const Tensor*>& parts) {
  Fp8ImageShape s;
  for (const Tensor* t : parts) {
    if (!t->present()) continue;
    s.rows += t->shape.at(0);
    s.cols = t->shape.at(1);
    s.block = s.block || (is_fp8(*t) && t->scales->block_cols < t->shape[1]);
  }
  return s;
}

Fp8Image build_fp8_image(const std::vector<const Tensor*>& parts, int interleave_tile) {
  std::vector<Part> ps;
  Fp8Image img;
  for (const Tensor* t : parts) {
    if (!t->present()) continue;
    Tensor q = quantize_fp8_per_channel(*t);
    if (q.shape.size() != 2) invalid("'" + q.name + "' is not a matrix");
    if (!ps.empty() && q.shape[1] != img.cols)
      invalid("cannot fuse '" + q.name + "' " + q.shape_str() + " with '" + ps.front().t.name +
              "'");
    img.cols = q.shape[1];
    img.rows += q.shape[0];
    Fp8Scales s = q.scales->per_row();
    const bool blocked = s.block_cols < s.cols;
    if (blocked && s.block_cols != kBlockCols)
      invalid("'" + q.name + "' has blocks of " + std::to_string(s.block_cols) +
              " columns (supported: 128)");
    img.block = img.block || blocked;
    ps.push_back({std::move(q), std::move(s)});
  }
  if (ps.empty()) return img;
  const int64_t rows = img.rows, cols = img.cols,
                kb = img.block ? (cols + kBlockCols - 1) / kBlockCols : 1;
  // Source row of each image row.
  std::vector<std::pair<const Part*, int64_t>> src;
  for (const Part& p : ps)
    for (int64_t r = 0; r < p.t.shape[0]; ++r) src.emplace_back(&p, r);
  if (interleave_tile > 0) {
    if (ps.size() != 2 || ps[0].t.shape[0] != ps[1].t.shape[0] ||
        ps[0].t.shape[0] % interleave_tile)
      invalid("interleaving needs two parts of equal rows in whole tiles");
    const int64_t half = ps[0].t.shape[0], tile = interleave_tile;
    std::vector<std::pair<const Part*, int64_t>> inter(src.size());
    for (int64_t r = 0; r < half; ++r) {
      const int64_t at = (r / tile) * 2 * tile + r % tile;
      inter[at] = src[r];
      inter[at + tile] = src[half + r];
    }
    src = std::move(inter);
  }
  img.bytes.resize(static_cast<size_t>(rows * cols));
  img.scales.resize(static_cast<size_t>(kb * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto [p, pr] = src[r];
    std::memcpy(img.bytes.data() + r * cols, static_cast<const uint8_t*>(p->t.data) + pr * cols,
                cols);
    const int64_t gc = p->s.grid_cols();  // 1 (per row) or ceil(cols / 128)
    for (int64_t b = 0; b < kb; ++b)
      img.scales[b * rows + r] = p->s.values[pr * gc + (gc == 1 ? 0 : b)];
  }
  const bool all_static =
      std::all_of(ps.begin(), ps.end(), [](const Part& p) { return p.s.input_scale > 0; });
  if (all_static)
    for (const Part& p : ps) img.input_scale = std::max(img.input_scale, p.s.input_scale);
  return img;
}

}  // namespace rill::cuda
