#include "engine/model/tensor.h"

#include <cstring>

#include "engine/error.h"
#include "engine/model/fp8.h"
#include "engine/model/fp8_weights.h"

namespace rill {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void Tensor::to_f32(float* dst) const {
  if (dtype != DType::kF8E4M3) {
    convert_to_f32(dtype, data, dst, static_cast<size_t>(numel()));
    return;
  }
  if (!scales || shape.size() != 2 || scales->rows != shape[0] || scales->cols != shape[1])
    throw Error(ErrorCode::kInvalidArgument,
                "fp8 tensor '" + name + "' " + shape_str() + " has no matching scales");
  const auto* q = static_cast<const uint8_t*>(data);
  const int64_t rows = shape[0], cols = shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = fp8::e4m3_to_float(q[r * cols + c]) * scales->at(r, c);
}

std::vector<float> Tensor::to_f32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  to_f32(out.data());
  return out;
}

Tensor make_f32_tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  auto buf = std::make_shared<std::vector<float>>(std::move(values));
  Tensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data = buf->data();
  t.owner = std::shared_ptr<const void>(buf, buf->data());
  if (static_cast<size_t>(t.numel()) != buf->size())
    throw Error(ErrorCode::kInternal,
                "make_f32_tensor: shape does not match the buffer for " + t.name);
  return t;
}

Tensor concat_rows(const std::string& name, const std::vector<const Tensor*>& parts) {
  Tensor out;
  out.name = name;
  int64_t rows = 0;
  const Tensor* first = nullptr;
  for (const Tensor* p : parts) {
    if (!p->present()) continue;
    if (!first) first = p;
    if (p->scales)  // the scale grids would need merging: callers concatenate after dequantizing
      throw Error(ErrorCode::kInvalidArgument, "cannot concatenate the fp8 tensor " + p->name);
    if (p->dtype != first->dtype || p->shape.size() != first->shape.size() ||
        !std::equal(p->shape.begin() + 1, p->shape.end(), first->shape.begin() + 1))
      throw Error(ErrorCode::kInvalidArgument, "cannot concatenate " + first->name + " " +
                                                   first->shape_str() + " with " + p->name + " " +
                                                   p->shape_str());
    rows += p->shape[0];
  }
  if (!first) return out;
  out.dtype = first->dtype;
  out.shape = first->shape;
  out.shape[0] = rows;
  auto buf = std::make_shared<std::vector<std::byte>>(out.nbytes());
  size_t off = 0;
  for (const Tensor* p : parts) {
    if (!p->present()) continue;
    std::memcpy(buf->data() + off, p->data, p->nbytes());
    off += p->nbytes();
  }
  out.data = buf->data();
  out.owner = std::shared_ptr<const void>(buf, buf->data());
  return out;
}

}  // namespace rill
