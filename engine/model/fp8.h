// fp8 e4m3 on the host, for the CPU engine's emulation of an fp8 KV cache and the kernel tests.
// Format (OCP E4M3FN, what cuda_fp8.h calls __NV_E4M3): 1 sign bit, 4 exponent bits (bias 7),
// 3 mantissa bits; no infinities; S.1111.111 is NaN; largest finite 448, smallest normal 2^-6,
// smallest subnormal 2^-9. The encoder rounds to nearest even and saturates finite overflow and
// infinities to +-448, NaN gives 0x7F: the bytes of the GPU's cvt.rn.satfinite.e4m3x2.f32. No
// CUDA header is needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace rill::fp8 {

constexpr float kE4m3Max = 448.0f;

/// e4m3 byte of x (round to nearest even, saturating).
inline uint8_t e4m3_from_float(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;          // NaN (sign dropped, as cuda_fp8.h does)
  if (abs >= 0x43e00000u) return sign | 0x7e;  // |x| >= 448, inf included: +-448
  if (abs <= 0x3a800000u) return sign;         // |x| <= 2^-10 (a tie at 2^-10 goes to even 0)
  // |x| = M * 2^(E - 23) with the 24-bit significand M and E >= -10 (no fp32 subnormal gets here).
  const int e = static_cast<int>(abs >> 23) - 127;
  const uint32_t m24 = (abs & 0x7fffffu) | 0x800000u;
  // Quantum of the e4m3 binade: 2^(max(E, -6) - 3) (below 2^-6 the subnormals' 2^-9). In units of
  // it |x| is M >> shift; a carry to 16 (or, for subnormals, 8) moves to the next binade and the
  // code below stays right because e4m3 codes are consecutive across binades.
  const int eb = e < -6 ? -6 : e;
  const int shift = 20 + eb - e;  // 20..24
  uint32_t m = m24 >> shift;
  const uint32_t rem = m24 & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;
  // Normal binade eb >= -6: exponent field eb + 7, mantissa m - 8 (m in [8, 16]); subnormal: m.
  const uint32_t code = static_cast<uint32_t>(eb + 6) * 8 + m;
  return static_cast<uint8_t>(sign | code);
}

/// The value of an e4m3 byte (exact in fp32).
inline float e4m3_to_float(uint8_t b) {
  const int exp = (b >> 3) & 0xf, mant = b & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  const float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                           : std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return (b & 0x80) ? -v : v;
}

/// What an fp8 cache with per-tensor `scale` gives back for x: e4m3(x / scale) * scale.
inline float e4m3_round_trip(float x, float scale) {
  return e4m3_to_float(e4m3_from_float(x / scale)) * scale;
}

}  // namespace rill::fp8
