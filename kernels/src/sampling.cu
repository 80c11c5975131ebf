// GPU sampler with the semantics of the CPU sampler (engine/runner/sampling.cc). One CTA per row:
//
//  1. penalties in place on the logits, then the grammar mask (-inf where a constrained row's
//     bitset disallows the token), and the max / argmax (greedy ends here);
//  2. e = exp((logit - max) / T) written over the logits. The kept-set thresholds and the draw
//     are invariant to the softmax's normalisation, so the search runs on e (whose max is exactly
//     1, so tau_m = min_p) and the division by the sum is never done;
//  3. thresholds by binary search over the bit patterns of e (non-negative floats order like
//     their bits), each step one block-wide reduction of (count, mass) of {e >= t}:
//       tau_k = largest t with count(e >= t) >= top_k,
//       tau_p = largest t >= tau_k with mass(e >= t) >= top_p * mass(e >= tau_k);
//     as soon as the candidates {e >= lo} of a search number at most kCap, they are compacted
//     (in id order) into shared memory and every later pass runs there instead of on the row;
//  4. u = philox_uniform(seed, step), target = u * mass(e >= tau); the token is the first kept id
//     whose inclusive prefix mass exceeds the target (the last kept id when rounding leaves it
//     unreached), by a block-wide prefix scan in id order;
//  5. output_counts[slot, token] += 1 and out_tokens[row] = token.
// Every sum is taken in a fixed order, so a row's result depends on its data, seed and step only.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <string>

#include "dispatch.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rill/kernels/philox.h"
#include "rill/kernels/sampling.h"

namespace rill::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kItems = 4;           // consecutive ids per thread in the ordered (id-order) scans
constexpr int kCap = 4096;          // candidates held in shared memory (32 KB with their ids)
constexpr int kMaxVocab = 1 << 24;  // counts are summed as floats, exact below 2^24

struct CountMass {
  float count, mass;  // of the elements >= a threshold
  __device__ CountMass operator+(const CountMass& o) const {
    return {count + o.count, mass + o.mass};
  }
};
__device__ __forceinline__ CountMass shfl_xor(CountMass v, int m) {
  return {kernels::shfl_xor(v.count, m), kernels::shfl_xor(v.mass, m)};
}

struct ArgMax {
  float value;
  int index;  // INT_MAX: none
};
__device__ __forceinline__ ArgMax shfl_xor(ArgMax v, int m) {
  return {kernels::shfl_xor(v.value, m), kernels::shfl_xor(v.index, m)};
}
struct ArgMaxOp {  // the larger value, the lower index on ties
  __device__ ArgMax operator()(ArgMax a, ArgMax b) const {
    return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
  }
};

struct HitLast {
  int first_hit, last_kept;  // positions in the scanned set; INT_MAX / -1: none
};
__device__ __forceinline__ HitLast shfl_xor(HitLast v, int m) {
  return {kernels::shfl_xor(v.first_hit, m), kernels::shfl_xor(v.last_kept, m)};
}
struct HitLastOp {
  __device__ HitLast operator()(HitLast a, HitLast b) const {
    return {min(a.first_hit, b.first_hit), max(a.last_kept, b.last_kept)};
  }
};

struct Shared {
  float cand_value[kCap];
  int cand_id[kCap];
  float f[32];
  int i[32];
  CountMass cm[32];
  ArgMax am[32];
  HitLast hl[32];
};

// The values the passes run over: the whole row (id = position) or the compacted candidates.
struct ValueSet {
  const float* value;
  const int* id;  // null: id = position
  int n;
  __device__ int id_at(int pos) const { return id ? id[pos] : pos; }
};

__device__ CountMass stats_at_least(const ValueSet& set, float t, Shared& sh) {
  CountMass s{0.0f, 0.0f};
  for (int i = threadIdx.x; i < set.n; i += kThreads) {
    const float v = set.value[i];
    if (v >= t) s = s + CountMass{1.0f, v};
  }
  return block_reduce(s, Sum{}, CountMass{0.0f, 0.0f}, sh.cm);
}

// Copies {e >= t} of the row, in id order, into the shared candidate arrays (count <= kCap).
__device__ ValueSet compact(const ValueSet& row, float t, Shared& sh) {
  int written = 0;
  for (int base = 0; base < row.n; base += kThreads * kItems) {
    const int i0 = base + threadIdx.x * kItems;
    float v[kItems];
    int count = 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      v[j] = i0 + j < row.n ? row.value[i0 + j] : -1.0f;
      count += v[j] >= t;
    }
    int total;
    int pos = written + block_inclusive_scan(count, sh.i, total) - count;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (v[j] >= t) {
        sh.cand_value[pos] = v[j];
        sh.cand_id[pos] = i0 + j;
        ++pos;
      }
    }
    written += total;
  }
  __syncthreads();  // candidates visible to every thread
  return ValueSet{sh.cand_value, sh.cand_id, written};
}

// Binary search for the largest bit pattern lo in [lo, hi) whose stats satisfy `ok`, given that
// stats(lo) satisfy it (at_lo) and stats(hi) do not. Compacts `set` on the way when it can.
template <typename Ok>
__device__ uint32_t search(uint32_t lo, uint32_t hi, CountMass& at_lo, ValueSet& set,
                           bool& compacted, Ok ok, Shared& sh) {
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    const CountMass s = stats_at_least(set, __uint_as_float(mid), sh);
    if (ok(s)) {
      lo = mid;
      at_lo = s;
      if (!compacted && s.count <= kCap) {
        set = compact(set, __uint_as_float(lo), sh);
        compacted = true;
      }
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Inverse-CDF draw over {e >= tau} in id order.
__device__ int draw(const ValueSet& set, float tau, float target, Shared& sh) {
  float running = 0.0f;  // kept mass of the earlier chunks
  int last_kept = -1;
  for (int base = 0; base < set.n; base += kThreads * kItems) {
    const int i0 = base + threadIdx.x * kItems;
    float v[kItems];
    float local = 0.0f;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      v[j] = i0 + j < set.n ? set.value[i0 + j] : -1.0f;
      if (v[j] >= tau) local += v[j];
    }
    float total;
    float cum = running + (block_inclusive_scan(local, sh.f, total) - local);
    HitLast hl{INT_MAX, -1};
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (v[j] >= tau) {
        cum += v[j];
        if (cum > target && hl.first_hit == INT_MAX) hl.first_hit = i0 + j;
        hl.last_kept = i0 + j;
      }
    }
    hl = block_reduce(hl, HitLastOp{}, HitLast{INT_MAX, -1}, sh.hl);
    if (hl.first_hit != INT_MAX) return set.id_at(hl.first_hit);
    if (hl.last_kept >= 0) last_kept = set.id_at(hl.last_kept);
    running += total;
  }
  return last_kept;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleBatch p) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  __shared__ Shared sh;
  const int vocab = p.vocab;
  const SamplingRow r = p.rows[blockIdx.x];
  float* logits = p.logits + static_cast<int64_t>(blockIdx.x) * vocab;  // [vocab]
  const bool has_state = r.state_slot >= 0;
  const int64_t state_off = static_cast<int64_t>(r.state_slot) * vocab;
  int32_t* counts = has_state && p.output_counts ? p.output_counts + state_off : nullptr;
  const uint8_t* seen = has_state && p.prompt_mask ? p.prompt_mask + state_off : nullptr;
  const uint32_t* mask = r.mask_row >= 0 && p.token_masks
                             ? p.token_masks + static_cast<int64_t>(r.mask_row) * p.mask_words
                             : nullptr;  // [mask_words]

  // 1. Penalties (as the CPU: repetition on prompt or generated tokens, then frequency and
  //    presence on generated ones) and the argmax, lowest id on ties.
  const bool rep = r.repetition_penalty != 1.0f;
  const bool penalise =
      (counts || seen) && (rep || r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f);
  ArgMax best{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    float l = logits[i];
    if (penalise) {
      const int c = counts ? counts[i] : 0;
      if (rep && (c > 0 || (seen && seen[i])))
        l = l > 0 ? l / r.repetition_penalty : l * r.repetition_penalty;
      if (c > 0) l -= r.frequency_penalty * static_cast<float>(c) + r.presence_penalty;
    }
    if (mask && !((mask[i >> 5] >> (i & 31)) & 1u)) l = -INFINITY;  // the grammar disallows it
    if (penalise || mask) logits[i] = l;
    if (l > best.value) best = {l, i};
  }
  best = block_reduce(best, ArgMaxOp{}, ArgMax{-INFINITY, INT_MAX}, sh.am);
  int token =
      best.index == INT_MAX ? 0 : best.index;  // all -inf (or NaN): id 0, as the CPU's argmax

  if (r.temperature > 1e-6f && best.index != INT_MAX) {
    // 2. Unnormalised probabilities.
    const float mx = best.value;
    float total = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float e = expf((logits[i] - mx) / r.temperature);
      logits[i] = e;
      total += e;
    }
    total = block_sum(total, sh.f);  // also orders the writes above before the reads below

    // 3. Kept-set threshold.
    ValueSet set{logits, nullptr, vocab};
    bool compacted = false;
    uint32_t lo = 0;  // count(e >= 0) = vocab, mass = total
    CountMass at_lo{static_cast<float>(vocab), total};
    const uint32_t hi = __float_as_uint(1.0f) + 1;  // e <= 1: nothing is >= the float after 1
    if (r.top_k > 0 && r.top_k < vocab) {
      const float k = static_cast<float>(r.top_k);
      lo = search(
          lo, hi, at_lo, set, compacted, [k](const CountMass& s) { return s.count >= k; }, sh);
    }
    if (r.top_p < 1.0f) {
      const float need = r.top_p * at_lo.mass;  // of the top-k set (or of everything)
      lo = search(
          lo, hi, at_lo, set, compacted, [need](const CountMass& s) { return s.mass >= need; }, sh);
    }
    // A masked row never keeps a zero-probability (disallowed) token.
    const float tau =
        fmaxf(fmaxf(__uint_as_float(lo), r.min_p > 0.0f ? r.min_p : 0.0f), mask ? FLT_MIN : 0.0f);

    // 4. The draw.
    const float kept = stats_at_least(set, tau, sh).mass;
    const float target = philox_uniform(r.seed, r.step) * kept;
    const int drawn = draw(set, tau, target, sh);
    if (drawn >= 0) token = drawn;
  }

  // 5. Bookkeeping.
  if (threadIdx.x == 0) {
    p.out_tokens[blockIdx.x] = token;
    if (counts) atomicAdd(counts + token, 1);
  }
}

__global__ void mark_prompt_kernel(uint8_t* __restrict__ prompt_mask,  // [num_slots, vocab]
                                   int vocab, int slot, const int32_t* __restrict__ tokens,
                                   int num_tokens) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  uint8_t* row = prompt_mask + static_cast<int64_t>(slot) * vocab;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < num_tokens; i += gridDim.x * blockDim.x) {
    const int32_t t = tokens[i];
    if (t >= 0 && t < vocab) row[t] = 1;
  }
}

}  // namespace

cudaError_t launch_sample(const SampleBatch& p, cudaStream_t stream) {
  if (p.num_rows < 0) return invalid_argument("sample: negative num_rows");
  if (p.num_rows == 0) return cudaSuccess;
  if (p.vocab <= 0 || p.vocab >= kMaxVocab)
    return invalid_argument("sample: unsupported vocab=" + std::to_string(p.vocab));
  if (!p.logits || !p.rows || !p.out_tokens)
    return invalid_argument("sample: logits, rows and out_tokens are required");
  if (p.token_masks && p.mask_words < (p.vocab + 31) / 32)
    return invalid_argument("sample: mask_words=" + std::to_string(p.mask_words) +
                            " is less than ceil(vocab / 32)");
  launch_kernel(sample_kernel, dim3(p.num_rows), dim3(kThreads), 0, stream, p);
  return launch_status();
}

cudaError_t launch_mark_prompt(uint8_t* prompt_mask, int vocab, int slot, const int32_t* tokens,
                               int num_tokens, cudaStream_t stream) {
  if (num_tokens < 0 || vocab <= 0 || slot < 0)
    return invalid_argument("mark_prompt: bad arguments");
  if (num_tokens == 0) return cudaSuccess;
  if (!prompt_mask || !tokens) return invalid_argument("mark_prompt: null pointer");
  constexpr int kMarkThreads = 256;
  const int blocks = std::min((num_tokens + kMarkThreads - 1) / kMarkThreads, 1024);
  launch_kernel(mark_prompt_kernel, dim3(blocks), dim3(kMarkThreads), 0, stream, prompt_mask, vocab,
                slot, tokens, num_tokens);
  return launch_status();
}

}  // namespace rill::kernels
