// Diagnostic (branch exp/fp8-stamps): the %globaltimer stamps of the decode kernels' CTAs
// (kernels/src/probe_stamps.cuh), [kind][slot][cta][event], kind 0 decode attention (the CUDA-core
// kernel), 1 o, 2 gate|up, 3 down, 4 qkv (the persistent fp8 GEMV). Each table has
// kProbeStampWords words; attention's fills kind 0, the GEMV's kinds 1-4.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace rill::kernels {

constexpr int kProbeKinds = 5, kProbeSlots = 32, kProbeCtas = 512, kProbeEvents = 7;  // the last: the SM's id
constexpr size_t kProbeStampWords = size_t(kProbeKinds) * kProbeSlots * kProbeCtas * kProbeEvents;
cudaError_t probe_read_attention_stamps(uint64_t* host);
cudaError_t probe_read_gemv_stamps(uint64_t* host);

}  // namespace rill::kernels
