#include "engine/cuda/step_meta.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "engine/error.h"

namespace rill::cuda {
namespace {

size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

struct Writer {
  char* out;
  const StepLayout& L;
  template <typename T> T* at(size_t section) const { return reinterpret_cast<T*>(out + section); }
};

int32_t physical_slot(const KvSequence& s, int64_t pos, int bs) {
  const long long slot = s.geometry.slot(pos);
  return s.block_table[slot / bs] * bs + static_cast<int32_t>(slot % bs);
}

// Attention descriptor of a decoding sequence whose newest token, at `pos`, is in the cache.
kernels::DecodeSeq decode_seq(const KvSequence& s, int64_t pos) {
  const KvGeometry& g = s.geometry;
  kernels::DecodeSeq d;
  d.geo.ring_base = g.ring_base;
  d.geo.ring_size = g.ring_tokens ? g.ring_tokens : INT32_MAX;
  d.num_sink = static_cast<int32_t>(std::min<int64_t>(g.n_sink, pos + 1));
  if (pos >= g.n_sink) {
    const int64_t rel = pos - g.n_sink;
    d.head_rel = static_cast<int32_t>(g.ring_tokens ? rel % g.ring_tokens : rel);
    d.window_count = static_cast<int32_t>(g.window ? std::min<int64_t>(g.window, rel + 1) : rel + 1);
  }
  return d;
}

// Attention descriptor of a prefill chunk at positions [c0, c0 + T); the cache holds [0, c0).
kernels::PrefillSeq prefill_seq(const KvSequence& s, int64_t c0, int T, int q_offset) {
  const KvGeometry& g = s.geometry;
  kernels::PrefillSeq p;
  p.geo.ring_base = g.ring_base;
  p.geo.ring_size = g.ring_tokens ? g.ring_tokens : INT32_MAX;
  p.q_offset = q_offset;
  p.num_tokens = T;
  p.sink_cache = static_cast<int32_t>(std::min<int64_t>(g.n_sink, c0));
  p.sink_fresh = static_cast<int32_t>(std::clamp<int64_t>(g.n_sink - c0, 0, T));
  const int64_t old_window = std::max<int64_t>(0, c0 - g.n_sink);  // old non-sink tokens
  p.cache_window = static_cast<int32_t>(g.window ? std::min<int64_t>(old_window, g.window - 1) : old_window);
  if (old_window > 0) {
    const int64_t rel = c0 - 1 - g.n_sink;
    p.old_head_rel = static_cast<int32_t>(g.ring_tokens ? rel % g.ring_tokens : rel);
  }
  p.window = g.window ? g.window : INT32_MAX;
  return p;
}

kernels::SamplingRow sampling_row(const SamplingSlot* s, int32_t mask_row) {
  kernels::SamplingRow r;
  r.mask_row = mask_row;
  if (!s) {
    r.temperature = 0.0f;  // inert rows: greedy, no state
    return r;
  }
  r.temperature = s->params.temperature;
  r.top_p = s->params.top_p;
  r.min_p = s->params.min_p;
  r.top_k = s->params.top_k;
  r.repetition_penalty = s->params.repetition_penalty;
  r.presence_penalty = s->params.presence_penalty;
  r.frequency_penalty = s->params.frequency_penalty;
  r.seed = s->params.seed;
  r.step = s->step;
  r.state_slot = s->state_slot;
  return r;
}

}  // namespace

StepLayout StepLayout::make(const StepShape& s) {
  StepLayout L{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = align16(off + bytes);
    return at;
  };
  L.tokens = take(size_t(s.tokens) * 4);
  L.positions = take(size_t(s.tokens) * 8);
  L.sink_positions = take(size_t(s.tokens) * 8);
  L.rope_slot = take(size_t(s.tokens) * 4);
  L.late_slot = take(size_t(s.tokens) * 4);
  L.decode = take(size_t(s.decode) * sizeof(kernels::DecodeSeq));
  L.prefill = take(size_t(s.prefill) * sizeof(kernels::PrefillSeq));
  L.tables = take(size_t(s.decode + s.prefill) * s.max_blocks * 4);
  L.rows = take(size_t(s.logit_rows) * 4);
  L.sampling = take(size_t(s.sampled) * sizeof(kernels::SamplingRow));
  L.logprobs = take(s.logprobs ? size_t(s.sampled) * 4 : 0);  // nothing when nobody asks
  L.bytes = off;
  return L;
}

StepPlan plan_step(std::span<const StepInput> inputs, const std::vector<int64_t>& starts,
                   const KvCacheManager& kv, int max_blocks, int pad_decode_to, int32_t trash_block,
                   const std::vector<const SamplingSlot*>& sampling,
                   std::span<const int32_t> last_row, std::span<const int32_t> mask_row, char* out,
                   const char* device_base) {
  const int bs = kv.block_size();
  const int n = static_cast<int>(inputs.size());
  StepPlan plan;
  StepShape& sh = plan.shape;
  sh.max_blocks = max_blocks;
  std::vector<int> decode_inputs, prefill_inputs;
  for (int k = 0; k < n; ++k) (inputs[k].tokens.size() == 1 ? decode_inputs : prefill_inputs).push_back(k);
  const bool pad = pad_decode_to > 0;
  if (pad && !prefill_inputs.empty()) throw Error(ErrorCode::kInternal, "padded steps must be decode-only");
  sh.decode = pad ? std::max<int>(pad_decode_to, decode_inputs.size()) : static_cast<int>(decode_inputs.size());
  sh.prefill = static_cast<int>(prefill_inputs.size());
  sh.tokens = sh.decode;
  plan.input_first_row.assign(n, -1);
  for (int i = 0; i < static_cast<int>(decode_inputs.size()); ++i) plan.input_first_row[decode_inputs[i]] = i;
  for (int k : prefill_inputs) {
    plan.input_first_row[k] = sh.tokens;
    sh.tokens += static_cast<int>(inputs[k].tokens.size());
    plan.max_prefill_tokens = std::max<int>(plan.max_prefill_tokens, inputs[k].tokens.size());
  }
  // Logit rows: sampled rows first (all padded decode rows in a graph step), then extra rows.
  std::vector<int32_t> rows;
  plan.sampled_index.assign(n, -1);
  plan.logits_first.assign(n, -1);
  plan.logits_count.assign(n, 0);
  std::vector<const SamplingSlot*> sample_slots;
  std::vector<int32_t> sample_masks;  // per sampled row: its token-mask row, -1 none
  if (pad) {
    for (int r = 0; r < sh.decode; ++r) rows.push_back(r);
    sample_slots.assign(sh.decode, nullptr);
    sample_masks.assign(sh.decode, -1);
    for (int k : decode_inputs)
      if (inputs[k].sample) {
        plan.sampled_index[k] = plan.input_first_row[k];
        sample_slots[plan.input_first_row[k]] = sampling[k];
        sample_masks[plan.input_first_row[k]] = mask_row[k];
      }
  } else {
    for (int k = 0; k < n; ++k)
      if (inputs[k].sample) {
        plan.sampled_index[k] = static_cast<int>(rows.size());
        rows.push_back(plan.input_first_row[k] + static_cast<int>(inputs[k].tokens.size()) - 1);
        sample_slots.push_back(sampling[k]);
        sample_masks.push_back(mask_row[k]);
      }
  }
  sh.sampled = static_cast<int>(rows.size());
  plan.logprobs.assign(n, -1);
  for (int k = 0; k < n; ++k)
    if (plan.sampled_index[k] >= 0 && inputs[k].logprobs >= 0) {
      plan.logprobs[k] = inputs[k].logprobs;
      sh.logprobs = true;
    }
  for (int k = 0; k < n; ++k) {
    const int len = static_cast<int>(inputs[k].tokens.size());
    if (inputs[k].logits == LogitsMode::kNone) continue;
    plan.any_logits = true;
    if (inputs[k].logits == LogitsMode::kLast && plan.sampled_index[k] >= 0) {
      plan.logits_first[k] = plan.sampled_index[k];
      plan.logits_count[k] = 1;
      continue;
    }
    const int first = inputs[k].logits == LogitsMode::kAll ? 0 : len - 1;
    plan.logits_first[k] = static_cast<int>(rows.size());
    plan.logits_count[k] = len - first;
    for (int t = first; t < len; ++t) rows.push_back(plan.input_first_row[k] + t);
  }
  sh.logit_rows = static_cast<int>(rows.size());
  plan.layout = StepLayout::make(sh);
  const StepLayout& L = plan.layout;
  Writer w{out, L};

  auto table_row = [&](int s) { return w.at<int32_t>(L.tables) + size_t(s) * max_blocks; };
  auto table_dev = [&](int s) {
    return reinterpret_cast<const int32_t*>(device_base + L.tables + size_t(s) * max_blocks * 4);
  };
  auto fill_table = [&](int s, const std::vector<int32_t>& blocks) {
    int32_t* row = table_row(s);
    if (static_cast<int>(blocks.size()) > max_blocks) throw Error(ErrorCode::kInternal, "block table overflow");
    std::copy(blocks.begin(), blocks.end(), row);
    std::fill(row + blocks.size(), row + max_blocks, trash_block);
  };
  // Decode rows (and inert padding rows).
  for (int r = 0; r < sh.decode; ++r) {
    auto* dseq = w.at<kernels::DecodeSeq>(L.decode) + r;
    if (r < static_cast<int>(decode_inputs.size())) {
      const int k = decode_inputs[r];
      const KvSequence& s = kv.sequence(inputs[k].id);
      const int64_t pos = starts[k];
      const int32_t token = inputs[k].tokens[0];
      if (token == kLastSampled && last_row[k] < 0)
        throw Error(ErrorCode::kInternal, "kLastSampled without a row");
      w.at<int32_t>(L.tokens)[r] = token == kLastSampled ? -1 - last_row[k] : token;
      w.at<int64_t>(L.positions)[r] = pos;
      w.at<int64_t>(L.sink_positions)[r] = s.geometry.sink_query_pos(pos);
      w.at<int32_t>(L.rope_slot)[r] = physical_slot(s, pos, bs);
      fill_table(r, s.block_table);
      *dseq = decode_seq(s, pos);
      plan.max_decode_keys = std::max(
          plan.max_decode_keys, std::max(dseq->num_sink, 0) + std::max(dseq->window_count, 0));
    } else {
      w.at<int32_t>(L.tokens)[r] = 0;
      w.at<int64_t>(L.positions)[r] = 0;
      w.at<int64_t>(L.sink_positions)[r] = 0;
      w.at<int32_t>(L.rope_slot)[r] = trash_block * bs;
      fill_table(r, {});
      *dseq = kernels::DecodeSeq{};
    }
    w.at<int32_t>(L.late_slot)[r] = -1;
    dseq->geo.block_table = table_dev(r);
  }
  // Prefill chunks: attention reads the cache as it was; their K/V are stored afterwards.
  for (int p = 0; p < sh.prefill; ++p) {
    const int k = prefill_inputs[p];
    const KvSequence& s = kv.sequence(inputs[k].id);
    const int64_t c0 = starts[k];
    const int len = static_cast<int>(inputs[k].tokens.size());
    const int row0 = plan.input_first_row[k];
    const int64_t end = c0 + len;
    for (int t = 0; t < len; ++t) {
      const int64_t pos = c0 + t;
      const bool overwritten = s.geometry.ring_tokens && pos >= s.geometry.n_sink && pos < end - s.geometry.ring_tokens;
      w.at<int32_t>(L.tokens)[row0 + t] = inputs[k].tokens[t];
      w.at<int64_t>(L.positions)[row0 + t] = pos;
      w.at<int64_t>(L.sink_positions)[row0 + t] = s.geometry.sink_query_pos(pos);
      w.at<int32_t>(L.rope_slot)[row0 + t] = -1;
      w.at<int32_t>(L.late_slot)[row0 + t] = overwritten ? -1 : physical_slot(s, pos, bs);
    }
    fill_table(sh.decode + p, s.block_table);
    auto* pseq = w.at<kernels::PrefillSeq>(L.prefill) + p;
    *pseq = prefill_seq(s, c0, len, row0);
    pseq->geo.block_table = table_dev(sh.decode + p);
  }
  std::copy(rows.begin(), rows.end(), w.at<int32_t>(L.rows));
  for (int i = 0; i < sh.sampled; ++i) w.at<kernels::SamplingRow>(L.sampling)[i] = sampling_row(sample_slots[i], sample_masks[i]);
  if (sh.logprobs) {
    int32_t* top_n = w.at<int32_t>(L.logprobs);
    std::fill(top_n, top_n + sh.sampled, -1);
    for (int k = 0; k < n; ++k)
      if (plan.logprobs[k] >= 0) top_n[plan.sampled_index[k]] = plan.logprobs[k];
  }
  return plan;
}

}  // namespace rill::cuda
