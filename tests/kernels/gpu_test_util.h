// Helpers for the kernel tests: skipping without a GPU, device buffers with guard regions,
// host-side fp16/bf16 conversion, and error metrics (max abs and normalized L2).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/common.h"

namespace rill::testing {

/// True when a CUDA device is usable.
bool have_gpu();

/// Put at the top of every GPU test: skips visibly where no GPU exists.
#define RILL_REQUIRE_GPU()                                                     \
  do {                                                                        \
    if (!::rill::testing::have_gpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped"; \
  } while (0)

#define CUDA_OK(expr)                                                                     \
  do {                                                                                    \
    cudaError_t err_ = (expr);                                                            \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_) << " / "  \
                                 << ::rill::kernels::last_kernel_error_detail();           \
  } while (0)

uint16_t to_half_bits(float f, kernels::DType t);   // round to nearest even
float from_half_bits(uint16_t h, kernels::DType t);
/// Rounds each value through the dtype (so references see exactly what the GPU sees).
std::vector<float> round_to(const std::vector<float>& v, kernels::DType t);

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.0f);

/// A device allocation of `n` elements of `elem_bytes` each, with `kGuard` sentinel bytes on
/// both sides; check_guards() fails the test if a kernel wrote outside [0, n).
class DeviceBuffer {
 public:
  static constexpr size_t kGuard = 256;
  DeviceBuffer(size_t n, size_t elem_bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return base_ + kGuard; }
  template <typename T> T* as() const { return reinterpret_cast<T*>(get()); }
  size_t bytes() const { return n_ * elem_; }
  /// Fills the payload with a poison byte pattern (0xFF: NaN in fp16/bf16/fp32).
  void poison();
  void upload(const void* host);
  void download(void* host) const;
  /// Uploads floats as dtype (elem_bytes 2) or fp32 (elem_bytes 4).
  void upload_floats(const std::vector<float>& v, kernels::DType t);
  std::vector<float> download_floats(kernels::DType t) const;
  ::testing::AssertionResult check_guards() const;

 private:
  char* base_ = nullptr;
  size_t n_, elem_;
};

/// ||a - b||_2 / max(||b||_2, tiny), and max |a - b|.
double normalized_error(const std::vector<float>& got, const std::vector<float>& want);
double max_abs_error(const std::vector<float>& got, const std::vector<float>& want);
/// True when any element is NaN or inf.
bool has_nonfinite(const std::vector<float>& v);

/// Tolerances by dtype for results computed from rounded inputs with fp32 accumulation.
inline double tol_for(kernels::DType t) { return t == kernels::DType::kF16 ? 2e-3 : 1.6e-2; }

/// Both half-precision dtypes, for parameterised loops.
constexpr kernels::DType kDTypes[] = {kernels::DType::kF16, kernels::DType::kBF16};

/// One unit in the last place at 1.0.
inline double ulp1(kernels::DType t) { return t == kernels::DType::kF16 ? 0x1p-10 : 0x1p-7; }

/// A result rounded once to the dtype from an fp32 computation: every element written and finite,
/// at most about one ulp of the largest magnitude off the reference, normalized error in budget.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, kernels::DType t,
                  const std::string& what);

/// Random values already rounded to the dtype (what the GPU will see).
inline std::vector<float> rounded_random(size_t n, std::mt19937& rng, kernels::DType t, float scale = 1.0f) {
  return round_to(random_vector(n, rng, scale), t);
}

}  // namespace rill::testing
