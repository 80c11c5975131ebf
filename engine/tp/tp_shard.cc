#include "engine/tp/tp_shard.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "engine/error.h"
#include "engine/model/fp8_weights.h"

namespace rill::tp {
namespace {

std::string n(int64_t v) {
  return std::to_string(v);
}

// Scales of rows [r0, r0 + count) of an fp8 weight (per-row layout: the slice need not start on
// a block of rows).
std::shared_ptr<const Fp8Scales> scale_rows(const Fp8Scales& s, int64_t r0, int64_t count) {
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) rows[static_cast<size_t>(i)] = r0 + i;
  return std::make_shared<const Fp8Scales>(s.gather_rows(rows));
}

// Scales of columns [c0, c0 + count): whole-row blocks keep their values; 128-column blocks must
// start at c0 (tp_unsupported_reason refuses models where they would not).
std::shared_ptr<const Fp8Scales> scale_cols(const Fp8Scales& s, int64_t c0, int64_t count) {
  const Fp8Scales src = s.per_row();
  auto out = std::make_shared<Fp8Scales>(src);
  out->cols = count;
  if (src.block_cols >= src.cols) {  // one block across the row: per-row or per-tensor values
    out->block_cols = count;
    return out;
  }
  if (c0 % src.block_cols != 0)
    throw Error(ErrorCode::kInternal, "fp8 scales of " + s.name + ": column slice at " + n(c0) +
                                          " is not on a block of " + n(src.block_cols));
  const int64_t g0 = c0 / src.block_cols, gc = src.grid_cols();
  const int64_t ng = (count + src.block_cols - 1) / src.block_cols;
  out->values.assign(static_cast<size_t>(src.rows * ng), 0.0f);
  for (int64_t r = 0; r < src.rows; ++r)
    std::copy_n(src.values.begin() + r * gc + g0, ng, out->values.begin() + r * ng);
  return out;
}

}  // namespace

VocabRange vocab_range(int64_t vocab, int world, int rank) {
  VocabRange v;
  v.padded = (vocab + world - 1) / world;
  v.begin = std::min<int64_t>(vocab, v.padded * rank);
  v.end = std::min<int64_t>(vocab, v.begin + v.padded);
  return v;
}

std::optional<std::string> tp_unsupported_reason(const ModelConfig& c, int world) {
  if (world < 1 || world > kMaxWorld)
    return "tensor-parallel size " + n(world) + " is outside [1, " + n(kMaxWorld) + "]";
  if (c.num_heads % world != 0)
    return "num_attention_heads (" + n(c.num_heads) +
           ") is not a multiple of the tensor-parallel "
           "size " +
           n(world);
  if (c.num_kv_heads % world != 0 && world % c.num_kv_heads != 0)
    return "num_key_value_heads (" + n(c.num_kv_heads) +
           ") neither divides nor is a multiple "
           "of the tensor-parallel size " +
           n(world);
  if (c.intermediate_size % world != 0)
    return "intermediate_size (" + n(c.intermediate_size) +
           ") is not a multiple of the "
           "tensor-parallel size " +
           n(world);
  if ((world - 1) * ((int64_t(c.vocab_size) + world - 1) / world) >= c.vocab_size)
    return "vocab_size (" + n(c.vocab_size) + ") leaves a rank of tensor-parallel size " +
           n(world) + " no rows";
  if (c.quant.weights == WeightScaleKind::kBlock && c.quant.quantized() && world > 1) {
    const int64_t bc = c.quant.block_cols;
    if ((c.q_dim() / world) % bc != 0 || (c.intermediate_size / world) % bc != 0)
      return "block-scaled fp8 weights: each rank's columns of o_proj (" + n(c.q_dim() / world) +
             ") and down_proj (" + n(c.intermediate_size / world) + ") must be a multiple of " +
             "the " + n(bc) + "-column scale blocks";
  }
  return std::nullopt;
}

int first_kv_head(const ModelConfig& c, int world, int rank) {
  if (c.num_kv_heads >= world) return rank * (c.num_kv_heads / world);
  return rank / (world / c.num_kv_heads);  // world / kv ranks share each KV head
}

Tensor slice_rows(const Tensor& t, int64_t r0, int64_t count) {
  if (!t.present()) return t;
  if (t.shape.empty() || r0 < 0 || count < 0 || r0 + count > t.shape[0])
    throw Error(ErrorCode::kInternal, "tensor-parallel slice: rows [" + n(r0) + ", " +
                                          n(r0 + count) + ") of " + t.name + " " + t.shape_str());
  const int64_t row = t.shape.size() == 1 ? 1 : t.numel() / t.shape[0];
  Tensor out = t;
  out.shape[0] = count;
  out.data = static_cast<const char*>(t.data) + r0 * row * int64_t(dtype_size(t.dtype));
  if (t.scales) out.scales = scale_rows(*t.scales, r0, count);
  return out;
}

Tensor slice_cols(const Tensor& t, int64_t c0, int64_t count) {
  if (!t.present()) return t;
  if (t.shape.size() != 2 || c0 < 0 || count < 0 || c0 + count > t.shape[1])
    throw Error(ErrorCode::kInternal, "tensor-parallel slice: columns [" + n(c0) + ", " +
                                          n(c0 + count) + ") of " + t.name + " " + t.shape_str());
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t es = dtype_size(t.dtype);
  auto buf = std::make_shared<std::vector<char>>(static_cast<size_t>(rows * count) * es);
  const char* src = static_cast<const char*>(t.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(buf->data() + size_t(r * count) * es, src + size_t(r * cols + c0) * es,
                size_t(count) * es);
  Tensor out = t;
  out.shape = {rows, count};
  out.data = buf->data();
  out.owner = std::shared_ptr<const void>(buf, buf->data());
  if (t.scales) out.scales = scale_cols(*t.scales, c0, count);
  return out;
}

Model shard_model(const Model& model, int world, int rank) {
  const ModelConfig& c = model.config;
  if (const auto why = tp_unsupported_reason(c, world))
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size: " + *why);
  if (rank < 0 || rank >= world)
    throw Error(ErrorCode::kInternal, "tensor-parallel rank " + n(rank) + " of " + n(world));
  Model out;
  out.path = model.path;
  out.tokenizer = model.tokenizer;
  out.generation = model.generation;
  out.config = c;
  ModelConfig& s = out.config;
  s.num_heads = c.num_heads / world;
  s.num_kv_heads = std::max(1, c.num_kv_heads / world);
  s.intermediate_size = c.intermediate_size / world;
  const int64_t hd = c.head_dim, q0 = int64_t(rank) * s.q_dim(), qn = s.q_dim();
  const int64_t k0 = int64_t(first_kv_head(c, world, rank)) * hd, kn = s.kv_dim();
  const int64_t i0 = int64_t(rank) * s.intermediate_size, in = s.intermediate_size;
  const VocabRange v = vocab_range(c.vocab_size, world, rank);

  const ModelWeights& w = model.weights;
  ModelWeights& o = out.weights;
  o.embed = slice_rows(w.embed, v.begin, v.rows());
  o.lm_head = c.tie_word_embeddings ? o.embed : slice_rows(w.lm_head, v.begin, v.rows());
  o.final_norm = w.final_norm;
  o.final_norm_bias = w.final_norm_bias;
  for (const LayerWeights& l : w.layers) {
    LayerWeights r = l;  // norms and the biases of o and down whole
    r.q = slice_rows(l.q, q0, qn);
    r.k = slice_rows(l.k, k0, kn);
    r.v = slice_rows(l.v, k0, kn);
    r.q_bias = slice_rows(l.q_bias, q0, qn);
    r.k_bias = slice_rows(l.k_bias, k0, kn);
    r.v_bias = slice_rows(l.v_bias, k0, kn);
    r.o = slice_cols(l.o, q0, qn);
    r.gate = slice_rows(l.gate, i0, in);
    r.gate_bias = slice_rows(l.gate_bias, i0, in);
    r.up = slice_rows(l.up, i0, in);
    r.up_bias = slice_rows(l.up_bias, i0, in);
    r.down = slice_cols(l.down, i0, in);
    o.layers.push_back(std::move(r));
  }
  return out;
}

}  // namespace rill::tp
