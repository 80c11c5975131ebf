#include "tests/kernels/gpu_test_util.h"

#include <cmath>
#include <cstring>

namespace rill::testing {

bool have_gpu() {
  static const bool ok = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  return ok;
}

uint16_t to_half_bits(float f, kernels::DType t) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (t == kernels::DType::kBF16) {
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
  }
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x33000001u) return sign;
  const int e = static_cast<int>(a >> 23) - 127;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const int shift = e < -14 ? (-14 - e) + 13 : 13;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  if (e < -14) return sign | static_cast<uint16_t>(h);
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(e + 15) << 10) + (h - 0x400u));
}

float from_half_bits(uint16_t h, kernels::DType t) {
  uint32_t bits;
  if (t == kernels::DType::kBF16) {
    bits = static_cast<uint32_t>(h) << 16;
  } else {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
      if (m == 0) {
        bits = sign;
      } else {
        e = 113;
        while (!(m & 0x400u)) {
          m <<= 1;
          --e;
        }
        bits = sign | (e << 23) | ((m & 0x3ffu) << 13);
      }
    } else if (e == 31) {
      bits = sign | 0x7f800000u | (m << 13);
    } else {
      bits = sign | ((e + 112) << 23) | (m << 13);
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<float> round_to(const std::vector<float>& v, kernels::DType t) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = from_half_bits(to_half_bits(v[i], t), t);
  return out;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

DeviceBuffer::DeviceBuffer(size_t n, size_t elem_bytes) : n_(n), elem_(elem_bytes) {
  const size_t total = n * elem_bytes + 2 * kGuard;
  if (cudaMalloc(&base_, total) != cudaSuccess) {
    base_ = nullptr;
    ADD_FAILURE() << "cudaMalloc of " << total << " bytes failed";
    return;
  }
  cudaMemset(base_, 0xA5, total);
}

DeviceBuffer::~DeviceBuffer() {
  if (base_) cudaFree(base_);
}

void DeviceBuffer::poison() { cudaMemset(get(), 0xFF, bytes()); }
void DeviceBuffer::upload(const void* host) { cudaMemcpy(get(), host, bytes(), cudaMemcpyHostToDevice); }
void DeviceBuffer::download(void* host) const { cudaMemcpy(host, get(), bytes(), cudaMemcpyDeviceToHost); }

void DeviceBuffer::upload_floats(const std::vector<float>& v, kernels::DType t) {
  if (elem_ == 4) {
    cudaMemcpy(get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    return;
  }
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = to_half_bits(v[i], t);
  cudaMemcpy(get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice);
}

std::vector<float> DeviceBuffer::download_floats(kernels::DType t) const {
  std::vector<float> out(n_);
  if (elem_ == 4) {
    cudaMemcpy(out.data(), get(), n_ * 4, cudaMemcpyDeviceToHost);
    return out;
  }
  std::vector<uint16_t> h(n_);
  cudaMemcpy(h.data(), get(), n_ * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n_; ++i) out[i] = from_half_bits(h[i], t);
  return out;
}

::testing::AssertionResult DeviceBuffer::check_guards() const {
  std::vector<unsigned char> g(kGuard);
  for (int side = 0; side < 2; ++side) {
    const char* p = side == 0 ? base_ : base_ + kGuard + bytes();
    cudaMemcpy(g.data(), p, kGuard, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < kGuard; ++i)
      if (g[i] != 0xA5)
        return ::testing::AssertionFailure() << "write outside the buffer (" << (side ? "after" : "before")
                                             << " it, guard byte " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  if (got.size() != want.size()) return INFINITY;
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double max_abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  double m = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - want[i]));
  return got.size() == want.size() ? m : INFINITY;
}

bool has_nonfinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return true;
  return false;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, kernels::DType t,
                  const std::string& what) {
  ASSERT_FALSE(has_nonfinite(got)) << what << ": non-finite or unwritten output";
  double scale = 1e-6;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  EXPECT_LE(max_abs_error(got, want), 1.01 * ulp1(t) * scale) << what;
  EXPECT_LE(normalized_error(got, want), tol_for(t)) << what;
}

}  // namespace rill::testing
