#include "engine/cuda/cuda_weights.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/cuda/cuda_support.h"
#include "engine/cuda/fp8_image.h"
#include "engine/model/fp8_weights.h"

namespace rill::cuda {
namespace {

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

// Plans every tensor's place in one arena, then converts and copies them in.
class Uploader {
 public:
  explicit Uploader(kernels::DType dtype) : dtype_(dtype) {}

  /// Reserves room for the concatenation of `parts` (absent parts skipped); returns a slot id.
  /// interleave: two parts of equal shape whose rows alternate in tiles of 8 (kGateUpTile).
  int plan(std::vector<const Tensor*> parts, bool interleave = false) {
    size_t elems = 0;
    for (const Tensor* t : parts)
      if (t->present()) elems += static_cast<size_t>(t->numel());
    if (elems == 0) return -1;
    interleave = interleave && parts.size() == 2 && parts[0]->present() && parts[1]->present();
    items_.push_back({std::move(parts), offset_, elems, interleave});
    offset_ += align256(elems * 2);
    return static_cast<int>(items_.size()) - 1;
  }
  /// Reserves room for the fp8 image of `parts` (build_fp8_image): bytes, scales and, when every
  /// part has a static input scale, that scale. interleave: as plan().
  int plan_fp8(std::vector<const Tensor*> parts, bool interleave) {
    Fp8Item it;
    it.shape = fp8_image_shape(parts);
    if (it.shape.rows == 0) return -1;
    it.interleave = interleave;
    it.bytes = offset_;
    offset_ += align256(size_t(it.shape.rows * it.shape.cols));
    it.scales = offset_;
    offset_ += align256(it.shape.scale_count() * 4);
    bool all_static = true;
    for (const Tensor* t : parts)
      if (t->present()) all_static = all_static && is_fp8(*t) && t->scales->input_scale > 0;
    if (all_static) {
      it.input_scale = offset_;
      offset_ += align256(4);
    }
    it.parts = std::move(parts);
    fp8_items_.push_back(std::move(it));
    return static_cast<int>(fp8_items_.size()) - 1;
  }
  int plan_floats(std::vector<float> values) {
    floats_.push_back({std::move(values), offset_});
    offset_ += align256(floats_.back().values.size() * 4);
    return static_cast<int>(floats_.size()) - 1;
  }
  size_t bytes() const { return offset_; }

  void upload(char* base) {
    std::vector<uint16_t> host;
    for (const Item& it : items_) {
      host.resize(it.elems);
      size_t at = 0;
      for (const Tensor* t : it.parts) {
        if (!t->present()) continue;
        convert(*t, host.data() + at);
        at += static_cast<size_t>(t->numel());
      }
      if (it.interleave) host = interleave_halves(host, it.parts[0]->shape.at(0));
      RILL_CUDA(cudaMemcpy(base + it.offset, host.data(), it.elems * 2, cudaMemcpyHostToDevice));
    }
    for (const Floats& f : floats_)
      RILL_CUDA(cudaMemcpy(base + f.offset, f.values.data(), f.values.size() * 4, cudaMemcpyHostToDevice));
    for (const Fp8Item& it : fp8_items_) {
      const Fp8Image img = build_fp8_image(it.parts, it.interleave ? kGateUpTile : 0);
      if (img.rows != it.shape.rows || img.cols != it.shape.cols || img.block != it.shape.block ||
          img.scales.size() != it.shape.scale_count() ||
          (img.input_scale > 0) != (it.input_scale != kNone))
        throw Error(ErrorCode::kInternal,
                    "fp8 image of " + it.parts.front()->name + " differs from its plan");
      RILL_CUDA(
          cudaMemcpy(base + it.bytes, img.bytes.data(), img.bytes.size(), cudaMemcpyHostToDevice));
      RILL_CUDA(cudaMemcpy(base + it.scales, img.scales.data(), img.scales.size() * 4,
                           cudaMemcpyHostToDevice));
      if (it.input_scale != kNone)
        RILL_CUDA(cudaMemcpy(base + it.input_scale, &img.input_scale, 4, cudaMemcpyHostToDevice));
    }
  }
  /// The device view of fp8 slot `slot` in the arena at `base`.
  DeviceLinear fp8_linear(int slot, char* base) const {
    const Fp8Item& it = fp8_items_[slot];
    DeviceLinear d;
    d.w = base + it.bytes;
    d.scale = reinterpret_cast<const float*>(base + it.scales);
    d.scale_layout =
        it.shape.block ? kernels::Fp8ScaleLayout::kBlock128 : kernels::Fp8ScaleLayout::kPerRow;
    if (it.input_scale != kNone)
      d.input_scale = reinterpret_cast<const float*>(base + it.input_scale);
    return d;
  }
  size_t offset_of(int slot) const { return items_[slot].offset; }
  size_t float_offset_of(int slot) const { return floats_[slot].offset; }

 private:
  void convert(const Tensor& t, uint16_t* dst) const {
    const size_t n = static_cast<size_t>(t.numel());
    const DType want = dtype_ == kernels::DType::kF16 ? DType::kF16 : DType::kBF16;
    if (t.dtype == want) {
      std::memcpy(dst, t.data, n * 2);
      return;
    }
    std::vector<float> f = t.to_f32();
    for (size_t i = 0; i < n; ++i) dst[i] = want == DType::kF16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
  }
  /// [a rows; b rows] (rows each) -> tiles [a 8 rows; b 8 rows] in row order.
  static std::vector<uint16_t> interleave_halves(const std::vector<uint16_t>& ab, int64_t rows) {
    const size_t row = ab.size() / size_t(2 * rows), tile = size_t(kGateUpTile) * row;
    std::vector<uint16_t> out(ab.size());
    const uint16_t* b = ab.data() + ab.size() / 2;
    for (size_t r = 0; r < size_t(rows); r += kGateUpTile) {
      std::copy_n(ab.data() + r * row, tile, out.data() + 2 * r * row);
      std::copy_n(b + r * row, tile, out.data() + 2 * r * row + tile);
    }
    return out;
  }
  struct Item {
    std::vector<const Tensor*> parts;
    size_t offset, elems;
    bool interleave;
  };
  struct Floats {
    std::vector<float> values;
    size_t offset;
  };
  static constexpr size_t kNone = SIZE_MAX;
  struct Fp8Item {
    std::vector<const Tensor*> parts;
    bool interleave = false;
    Fp8ImageShape shape;
    size_t bytes = 0, scales = 0, input_scale = kNone;  // arena offsets
  };
  kernels::DType dtype_;
  std::vector<Item> items_;
  std::vector<Floats> floats_;
  std::vector<Fp8Item> fp8_items_;
  size_t offset_ = 0;
};

}  // namespace

kernels::DType resolve_dtype(const std::string& requested, DType stored) {
  return cuda_compute_dtype(requested, stored) == DType::kBF16 ? kernels::DType::kBF16
                                                               : kernels::DType::kF16;
}

DeviceWeights::DeviceWeights(const Model& model, kernels::DType dtype, WeightQuant quant)
    : dtype_(dtype), quant_(quant) {
  const ModelWeights& w = model.weights;
  const ModelConfig& c = model.config;
  const bool fp8 = quant == WeightQuant::kFp8;
  Uploader up(dtype);
  gate_up_interleaved_ = c.gated_mlp && c.intermediate_size % kGateUpTile == 0;
  // A linear layer's slot: fp8 (>= 0) or 16-bit (encoded as -2 - slot; -1: absent).
  auto linear = [&](std::vector<const Tensor*> parts, bool interleave, bool as_fp8) {
    if (as_fp8) return up.plan_fp8(std::move(parts), interleave);
    const int slot = up.plan(std::move(parts), interleave);
    return slot < 0 ? -1 : -2 - slot;
  };
  const int embed = up.plan({&w.embed});
  const bool head_fp8 = fp8 && !c.tie_word_embeddings && is_fp8(w.lm_head);
  const int head = c.tie_word_embeddings ? -2 - embed : linear({&w.lm_head}, false, head_fp8);
  const int fnorm = up.plan({&w.final_norm});
  const int fnorm_b = up.plan({&w.final_norm_bias});
  const int freq = up.plan_floats(c.rope.inv_freq());
  struct Slots {
    int an, anb, mn, mnb, qkv, bqkv, o, bo, upw, upb, down, bdown;
  };
  std::vector<Slots> slots;
  for (const LayerWeights& l : w.layers) {
    Slots s;
    s.an = up.plan({&l.attn_norm});
    s.anb = up.plan({&l.attn_norm_bias});
    s.mn = up.plan({&l.mlp_norm});
    s.mnb = up.plan({&l.mlp_norm_bias});
    s.qkv = linear({&l.q, &l.k, &l.v}, false, fp8);
    s.bqkv = up.plan({&l.q_bias, &l.k_bias, &l.v_bias});
    s.o = linear({&l.o}, false, fp8);
    s.bo = up.plan({&l.o_bias});
    s.upw = c.gated_mlp ? linear({&l.gate, &l.up}, gate_up_interleaved_, fp8)
                        : linear({&l.up}, false, fp8);
    s.upb = c.gated_mlp ? up.plan({&l.gate_bias, &l.up_bias}, gate_up_interleaved_) : up.plan({&l.up_bias});
    s.down = linear({&l.down}, false, fp8);
    s.bdown = up.plan({&l.down_bias});
    slots.push_back(s);
  }
  arena_ = DeviceMemory(up.bytes(), "model weights");
  char* base = arena_.as<char>();
  up.upload(base);
  auto at = [&](int slot) -> const void* { return slot < 0 ? nullptr : base + up.offset_of(slot); };
  auto lin = [&](int slot) {
    if (slot >= 0) return up.fp8_linear(slot, base);
    DeviceLinear d;
    d.w = slot == -1 ? nullptr : base + up.offset_of(-2 - slot);
    return d;
  };
  embed_ = at(embed);
  lm_head_ = lin(head);
  final_norm_ = at(fnorm);
  final_norm_bias_ = at(fnorm_b);
  inv_freq_ = reinterpret_cast<const float*>(base + up.float_offset_of(freq));
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slots& s = slots[i];
    DeviceLayer d;
    d.attn_norm = at(s.an);
    d.attn_norm_bias = at(s.anb);
    d.mlp_norm = at(s.mn);
    d.mlp_norm_bias = at(s.mnb);
    d.wqkv = lin(s.qkv);
    d.bqkv = at(s.bqkv);
    d.wo = lin(s.o);
    d.bo = at(s.bo);
    d.wup = lin(s.upw);
    d.bup = at(s.upb);
    d.wdown = lin(s.down);
    d.bdown = at(s.bdown);
    d.kv_scales = w.layers[i].kv_scales;
    layers_.push_back(d);
  }
}

}  // namespace rill::cuda
