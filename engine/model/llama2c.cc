#include "engine/model/llama2c.h"

#include <cstring>

#include "engine/error.h"
#include "engine/model/mapped_file.h"

namespace rill {
namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// Reads consecutive fp32 tensors out of the mapping, checking the file is long enough.
class Cursor {
 public:
  Cursor(std::shared_ptr<const MappedFile> f, size_t offset, std::string source)
      : file_(std::move(f)), offset_(offset), source_(std::move(source)) {}

  Tensor next(const std::string& name, std::vector<int64_t> shape) {
    Tensor t;
    t.name = name;
    t.dtype = DType::kF32;
    t.shape = std::move(shape);
    if (offset_ + t.nbytes() > file_->size)
      throw Error(ErrorCode::kInvalidArgument,
                  source_ + ": file ends inside tensor '" + name + "' (truncated checkpoint or wrong header)");
    t.data = file_->data + offset_;
    t.owner = std::shared_ptr<const void>(file_, file_->data);
    offset_ += t.nbytes();
    return t;
  }
  void skip(size_t bytes) { offset_ += bytes; }

 private:
  std::shared_ptr<const MappedFile> file_;
  size_t offset_;
  std::string source_;
};

// Meta layout: rows of each head interleave rotary pairs (2j, 2j+1); rotate-half layout keeps
// the first halves together: new row j = old row 2j, new row hd/2 + j = old row 2j + 1.
Tensor permute_rotary(const Tensor& t, int heads, int head_dim) {
  const int64_t cols = t.shape[1];
  std::vector<float> src = t.to_f32(), dst(src.size());
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < head_dim / 2; ++j)
      for (int a = 0; a < 2; ++a) {
        const int64_t from = static_cast<int64_t>(h) * head_dim + 2 * j + a;
        const int64_t to = static_cast<int64_t>(h) * head_dim + a * (head_dim / 2) + j;
        std::memcpy(&dst[to * cols], &src[from * cols], cols * sizeof(float));
      }
  return make_f32_tensor(t.name, t.shape, std::move(dst));
}

ModelConfig config_from_header(const Header& h, const std::string& source) {
  ModelConfig c;
  c.architecture = "llama2.c";
  c.arch = Arch::kLlama;
  c.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  c.tie_word_embeddings = h.vocab_size > 0;
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
  c.max_position_embeddings = h.seq_len;
  c.norm_eps = 1e-5f;
  c.rope.theta = 10000.0;
  c.rope.rotary_dim = c.head_dim;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.validate(source);
  if (c.head_dim * c.num_heads != c.hidden_size)
    throw Error(ErrorCode::kInvalidArgument, source + ": dim must be divisible by n_heads");
  return c;
}

}  // namespace

Llama2cCheckpoint load_llama2c(const std::filesystem::path& model_bin) {
  const std::string source = model_bin.string();
  auto file = map_file(model_bin);
  uint32_t magic = 0;
  if (file->size >= 4) std::memcpy(&magic, file->data, 4);
  Header h{};
  size_t offset = 0;
  int version = 0;
  bool shared = false;
  if (magic == 0x616b3432u) {  // "ak42": versioned export
    if (file->size < 256) throw Error(ErrorCode::kInvalidArgument, source + ": truncated llama2.c header");
    std::memcpy(&version, file->data + 4, 4);
    if (version != 1)
      throw Error(ErrorCode::kUnsupported, source + ": llama2.c export version " + std::to_string(version) +
                                               " is not supported (fp32 versions 0 and 1 are)");
    std::memcpy(&h, file->data + 8, sizeof(Header));
    shared = file->data[8 + sizeof(Header)] != std::byte{0};
    h.vocab_size = shared ? std::abs(h.vocab_size) : -std::abs(h.vocab_size);
    offset = 256;
  } else {
    if (file->size < sizeof(Header)) throw Error(ErrorCode::kInvalidArgument, source + ": truncated llama2.c header");
    std::memcpy(&h, file->data, sizeof(Header));
    offset = sizeof(Header);
  }
  Llama2cCheckpoint ck;
  ck.config = config_from_header(h, source);
  const ModelConfig& c = ck.config;
  const int64_t d = c.hidden_size, kv = c.kv_dim(), hid = c.intermediate_size, L = c.num_layers;
  Cursor cur(file, offset, source);
  ModelWeights& w = ck.weights;
  w.layers.resize(L);
  auto per_layer = [&](const char* what, std::vector<int64_t> shape, Tensor LayerWeights::*field) {
    for (int64_t i = 0; i < L; ++i)
      w.layers[i].*field = cur.next(std::string(what) + "[" + std::to_string(i) + "]", shape);
  };
  if (version == 0) {
    w.embed = cur.next("token_embedding_table", {c.vocab_size, d});
    per_layer("rms_att_weight", {d}, &LayerWeights::attn_norm);
  } else {
    per_layer("rms_att_weight", {d}, &LayerWeights::attn_norm);
    per_layer("rms_ffn_weight", {d}, &LayerWeights::mlp_norm);
    w.final_norm = cur.next("rms_final_weight", {d});
    w.embed = cur.next("token_embedding_table", {c.vocab_size, d});
  }
  per_layer("wq", {d, d}, &LayerWeights::q);
  per_layer("wk", {kv, d}, &LayerWeights::k);
  per_layer("wv", {kv, d}, &LayerWeights::v);
  per_layer("wo", {d, d}, &LayerWeights::o);
  if (version == 0) per_layer("rms_ffn_weight", {d}, &LayerWeights::mlp_norm);
  per_layer("w1", {hid, d}, &LayerWeights::gate);
  per_layer("w2", {d, hid}, &LayerWeights::down);
  per_layer("w3", {hid, d}, &LayerWeights::up);
  if (version == 0) {
    w.final_norm = cur.next("rms_final_weight", {d});
    cur.skip(static_cast<size_t>(c.max_position_embeddings) * c.head_dim * sizeof(float));  // freq_cis real+imag
  }
  w.lm_head = c.tie_word_embeddings ? w.embed : cur.next("wcls", {c.vocab_size, d});
  for (auto& l : w.layers) {
    l.q = permute_rotary(l.q, c.num_heads, c.head_dim);
    l.k = permute_rotary(l.k, c.num_kv_heads, c.head_dim);
  }
  return ck;
}

}  // namespace rill
