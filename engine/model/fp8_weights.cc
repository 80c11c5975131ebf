#include "engine/model/fp8_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "engine/error.h"
#include "engine/model/fp8.h"

namespace rill {
namespace {

[[noreturn]] void invalid(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  Tensor t;
  t.shape = shape;
  return t.shape_str();
}

// The scale grid `q` asks for on a weight [rows, cols], and the shapes a checkpoint may store it
// in: per-tensor [] / [1] / [1, 1]; per-channel [rows, 1] / [rows]; blocks [rows / 128, cols / 128]
// rounded up.
struct Grid {
  int64_t block_rows, block_cols;
  std::vector<std::vector<int64_t>> shapes;
};

Grid scale_grid(const QuantizationConfig& q, int64_t rows, int64_t cols) {
  switch (q.weights) {
    case WeightScaleKind::kTensor:
      return {rows, cols, {{}, {1}, {1, 1}}};
    case WeightScaleKind::kChannel:
      return {1, cols, {{rows, 1}, {rows}}};
    case WeightScaleKind::kBlock: {
      const int64_t br = q.block_rows, bc = q.block_cols;
      return {br, bc, {{(rows + br - 1) / br, (cols + bc - 1) / bc}}};
    }
  }
  return {};
}

// The values of a scale tensor, each finite and positive, else an error naming it.
std::vector<float> positive_values(const Tensor& t, const std::string& source) {
  if (t.dtype == DType::kF8E4M3) invalid(source, "scale tensor '" + t.name + "' is fp8");
  std::vector<float> v = t.to_f32();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || v[i] <= 0)
      invalid(source, "scale tensor '" + t.name + "' holds " + std::to_string(v[i]) + " at index " +
                          std::to_string(i) + " (scales must be finite and positive)");
  return v;
}

const Tensor& find_scale(const std::map<std::string, Tensor>& tensors, const std::string& name,
                         const std::string& weight, const std::string& source) {
  const auto it = tensors.find(name);
  if (it == tensors.end())
    invalid(source, "fp8 weight '" + weight + "' has no scale tensor '" + name + "'");
  return it->second;
}

Fp8Scales checkpoint_scales(const QuantizationConfig& q,
                            const std::map<std::string, Tensor>& tensors, const Tensor& w,
                            const std::string& module, const std::string& source) {
  if (w.shape.size() != 2)
    invalid(source, "fp8 weight '" + w.name + "' is not a matrix " + w.shape_str());
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const Tensor& s = find_scale(tensors, module + "." + q.scale_suffix(), w.name, source);
  const Grid grid = scale_grid(q, rows, cols);
  if (std::find(grid.shapes.begin(), grid.shapes.end(), s.shape) == grid.shapes.end())
    invalid(source, "scale tensor '" + s.name + "' has shape " + s.shape_str() + ", expected " +
                        shape_str(grid.shapes.front()) + " for fp8 weight '" + w.name + "' " +
                        w.shape_str() + " (" + q.describe() + ")");
  Fp8Scales out;
  out.name = s.name;
  out.rows = rows;
  out.cols = cols;
  out.block_rows = grid.block_rows;
  out.block_cols = grid.block_cols;
  out.values = positive_values(s, source);
  if (q.activations == ActivationQuant::kStaticPerTensor) {
    const Tensor& in = find_scale(tensors, module + ".input_scale", w.name, source);
    if (in.numel() != 1)
      invalid(source, "scale tensor '" + in.name + "' has shape " + in.shape_str() +
                          ", expected [] or [1] (static per-tensor activations)");
    out.input_scale = positive_values(in, source)[0];
  }
  return out;
}

// Calls fn(begin, end) over [0, n) on up to hardware_concurrency threads (one for small n).
template <typename Fn>
void parallel_rows(int64_t n, int64_t work_per_row, Fn&& fn) {
  const int64_t kMinWork = 1 << 20;
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads =
      std::clamp<int64_t>(n * work_per_row / kMinWork, 1, std::min<int64_t>(hw, n));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int64_t b = 0; b < n; b += per)
    pool.emplace_back([&fn, b, e = std::min(n, b + per)] { fn(b, e); });
  for (std::thread& t : pool) t.join();
}

}  // namespace

Fp8Scales Fp8Scales::per_row() const {
  if (block_rows == 1) return *this;
  Fp8Scales out = *this;
  out.block_rows = 1;
  const int64_t gc = grid_cols();
  out.values.resize(static_cast<size_t>(rows * gc));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < gc; ++c) out.values[r * gc + c] = values[(r / block_rows) * gc + c];
  return out;
}

Fp8Scales Fp8Scales::gather_rows(const std::vector<int64_t>& picked) const {
  const Fp8Scales src = per_row();
  Fp8Scales out = src;
  const int64_t gc = grid_cols();
  out.rows = static_cast<int64_t>(picked.size());
  out.values.resize(picked.size() * gc);
  for (size_t i = 0; i < picked.size(); ++i)
    std::copy_n(src.values.begin() + picked[i] * gc, gc, out.values.begin() + i * gc);
  return out;
}

void attach_fp8_scales(const QuantizationConfig& q, std::map<std::string, Tensor>& tensors,
                       const std::string& source) {
  for (auto& [name, t] : tensors) {
    if (t.dtype != DType::kF8E4M3) continue;
    if (!q.quantized())
      invalid(source,
              "tensor '" + name + "' is fp8 (F8_E4M3) but config.json has no quantization_config");
    if (!ends_with(name, ".weight"))
      invalid(source, "fp8 tensor '" + name + "' is not a weight (\"<module>.weight\")");
    const std::string module = name.substr(0, name.size() - 7);
    auto scales =
        std::make_shared<const Fp8Scales>(checkpoint_scales(q, tensors, t, module, source));
    t.scales = std::move(scales);
  }
}

Tensor quantize_fp8_per_channel(const Tensor& w) {
  if (w.dtype == DType::kF8E4M3) return w;
  if (w.shape.size() != 2)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot quantize '" + w.name + "' " + w.shape_str() + " per channel: not a matrix");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * cols));
  auto scales = std::make_shared<Fp8Scales>();
  scales->name = w.name + " (scales computed at load)";
  scales->rows = rows;
  scales->cols = cols;
  scales->block_rows = 1;
  scales->block_cols = cols;
  scales->values.resize(static_cast<size_t>(rows));
  std::atomic<int64_t> bad_row{-1};
  parallel_rows(rows, cols, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    const size_t es = dtype_size(w.dtype);
    for (int64_t r = begin; r < end; ++r) {
      convert_to_f32(w.dtype, static_cast<const std::byte*>(w.data) + r * cols * es, row.data(),
                     static_cast<size_t>(cols));
      float amax = 0;
      bool finite = true;
      for (float x : row) {
        finite = finite && std::isfinite(x);
        amax = std::max(amax, std::abs(x));
      }
      if (!finite) bad_row = r;
      // The largest |w| maps to 448, the largest e4m3; a row of zeros keeps scale 1.
      const float scale = amax > 0 ? amax / fp8::kE4m3Max : 1.0f;
      scales->values[r] = scale;
      uint8_t* out = bytes->data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = fp8::e4m3_from_float(row[c] / scale);
    }
  });
  if (bad_row >= 0)
    throw Error(ErrorCode::kInvalidArgument, "cannot quantize '" + w.name + "': row " +
                                                 std::to_string(bad_row.load()) +
                                                 " holds a value that is not finite");
  Tensor out;
  out.name = w.name;
  out.dtype = DType::kF8E4M3;
  out.shape = w.shape;
  out.data = bytes->data();
  out.owner = std::shared_ptr<const void>(bytes, bytes->data());
  out.scales = std::move(scales);
  return out;
}

}  // namespace rill
