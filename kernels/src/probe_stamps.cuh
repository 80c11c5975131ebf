// Diagnostic (branch exp/fp8-stamps): thread 0 of each CTA of the decode kernels notes the
// %globaltimer at a few events and, at its end, stores them for its launch. Each translation
// unit has its own table (no relocatable device code): read it with its probe_read_* function.
#pragma once

#include <cstdint>

namespace rill::kernels::probe {

constexpr int kKinds = 5;    // 0 decode attention, 1 o, 2 gate|up, 3 down, 4 qkv
constexpr int kSlots = 32;   // launches kept per kind (a step's layers)
constexpr int kCtas = 512;   // CTAs kept per launch
constexpr int kEvents = 7;  // the last: the SM's id

static __device__ uint64_t g_stamps[kKinds][kSlots][kCtas][kEvents];
static __device__ unsigned int g_count[kKinds];

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct Stamps {
  uint64_t t[kEvents] = {};
  __device__ __forceinline__ void mark(int e) {
    if (threadIdx.x == 0) t[e] = now();
  }
  // Every CTA counts itself once; launches of one kind end one after another, so count / CTAs is
  // the launch's index.
  __device__ __forceinline__ void flush(int kind) {
    if (threadIdx.x != 0 || kind < 0) return;
    const unsigned ctas = gridDim.x * gridDim.y * gridDim.z;
    const unsigned c = atomicAdd(&g_count[kind], 1u);
    const int slot = static_cast<int>((c / ctas) % kSlots);
    const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (cta >= kCtas) return;
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    t[kEvents - 1] = smid;
    for (int e = 0; e < kEvents; ++e) g_stamps[kind][slot][cta][e] = t[e];
  }
};

}  // namespace rill::kernels::probe
