// Megatron-style tensor-parallel sharding of a model on the host (docs/tensor_parallel.md): which
// slice of which weight each of `world` ranks holds. One code for every runner: the CPU runner's
// emulation (tests/engine/tp_cpu_test.cc) and the CUDA TP runner shard with these functions.
//
//   q, k, v, gate, up        column-parallel: rows [r * n / world, (r + 1) * n / world) of [n, H]
//                            (k and v: the rank's KV heads; replicated when kv_heads < world)
//   o, down                  row-parallel: columns of [H, q_dim] / [H, I]; their partial sums
//                            meet in one all-reduce each per layer, then the (whole) bias
//   embed, lm_head           vocabulary-parallel: rows [begin, end) of [V, H] (VocabRange)
//   norms, biases of o/down  replicated
//
// Row slices of a row-major checkpoint tensor are views into its mapping (a rank reads only
// them); column slices are gathered into buffers of their own, reading only the slice's bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/model/model.h"

namespace rill::tp {

/// Most ranks one tensor-parallel group takes (one host's GPUs).
inline constexpr int kMaxWorld = 8;

/// A rank's rows of the vocabulary: [begin, end). Every rank computes `padded` logit columns
/// (ceil(V / world)); the last may hold fewer real ones.
struct VocabRange {
  int64_t begin = 0, end = 0, padded = 0;
  int64_t rows() const { return end - begin; }
};
VocabRange vocab_range(int64_t vocab, int world, int rank);

/// Why `c` cannot be split over `world` ranks (nullopt: it can): heads must divide by world, KV
/// heads divide by it or divide it (then replicated), the MLP width divide by it, and for
/// block-scaled fp8 checkpoints each rank's columns of o and down start on a 128-column block.
std::optional<std::string> tp_unsupported_reason(const ModelConfig& c, int world);

/// The KV head rank `rank` holds first (its heads [first, first + kv_heads / world), or the one
/// head it shares with other ranks when kv_heads < world).
int first_kv_head(const ModelConfig& c, int world, int rank);

/// Rank `rank`'s shard of `model`: the config with its heads, KV heads and MLP width (vocabulary
/// and hidden size whole), and its slices of the weights (fp8 ones with their scales sliced
/// alike). The tokenizer and generation defaults are shared. kInvalidArgument with
/// tp_unsupported_reason's text when the model cannot be split so.
Model shard_model(const Model& model, int world, int rank);

/// Rows [r0, r0 + n) of a 2-D tensor (or a 1-D one's elements), a view sharing its storage.
Tensor slice_rows(const Tensor& t, int64_t r0, int64_t n);
/// Columns [c0, c0 + n) of a 2-D tensor, copied into a buffer of its own.
Tensor slice_cols(const Tensor& t, int64_t c0, int64_t n);

}  // namespace rill::tp
