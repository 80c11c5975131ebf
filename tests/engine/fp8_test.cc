// The host e4m3 codec (engine/model/fp8.h) against hand-checked values and against a brute-force
// nearest-value encoder over every midpoint and many random floats.
#include "engine/model/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace rill::fp8 {
namespace {

float pow2(int e) {
  return std::ldexp(1.0f, e);
}

TEST(Fp8E4m3, EncodesHandCheckedValues) {
  struct Case {
    float x;
    uint8_t want;
  };
  const Case cases[] = {
      {0.0f, 0x00},
      {-0.0f, 0x80},
      {pow2(-9), 0x01},  // smallest subnormal
      {3 * pow2(-9), 0x03},
      {7 * pow2(-9), 0x07},  // largest subnormal
      {pow2(-6), 0x08},      // smallest normal
      {1.0f, 0x38},
      {1.125f, 0x39},
      {-1.0f, 0xb8},
      {-3 * pow2(-9), 0x83},
      {240.0f, 0x77},
      {256.0f, 0x78},
      {416.0f, 0x7d},
      {448.0f, 0x7e},
      {-448.0f, 0xfe},
      // Saturation: finite overflow and infinities go to +-448.
      {449.0f, 0x7e},
      {464.0f, 0x7e},
      {500.0f, 0x7e},
      {1e30f, 0x7e},
      {-1e30f, 0xfe},
      {std::numeric_limits<float>::infinity(), 0x7e},
      {-std::numeric_limits<float>::infinity(), 0xfe},
      // Ties round to the even code.
      {1.0625f, 0x38},  // between 1 (0x38) and 1.125 (0x39)
      {1.1875f, 0x3a},  // between 1.125 (0x39) and 1.25 (0x3a)
      {1.9375f, 0x40},  // between 1.875 (0x3f) and 2 (0x40): carries into the exponent
      {-1.0625f, 0xb8},
      {pow2(-10), 0x00},  // half the smallest subnormal: to zero
      {-pow2(-10), 0x80},
      {1.5f * pow2(-9), 0x02},
      {2.5f * pow2(-9), 0x02},
      {7.5f * pow2(-9), 0x08},  // the largest subnormal rounds up to the smallest normal
      // Just past a tie rounds away from it.
      {std::nextafter(1.0625f, 2.0f), 0x39},
      {std::nextafter(pow2(-10), 1.0f), 0x01},
      {std::nextafter(pow2(-10), 0.0f), 0x00},
      {1e-30f, 0x00},
      {-1e-30f, 0x80},  // far below: signed zero
  };
  for (const Case& c : cases) {
    EXPECT_EQ(e4m3_from_float(c.x), c.want) << "x = " << c.x;
  }
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

TEST(Fp8E4m3, DecodesHandCheckedValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x01), pow2(-9));
  EXPECT_EQ(e4m3_to_float(0x07), 7 * pow2(-9));
  EXPECT_EQ(e4m3_to_float(0x08), pow2(-6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x3c), 1.5f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_float(0xc4), -3.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
}

TEST(Fp8E4m3, EveryCodeRoundTripsAndCodesAreMonotonic) {
  float prev = -1.0f;
  for (int b = 0; b < 0x7f; ++b) {  // the non-negative finite codes in order
    const float v = e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_GT(v, prev) << b;
    prev = v;
    EXPECT_EQ(e4m3_from_float(v), b);
    EXPECT_EQ(e4m3_from_float(-v), b | 0x80);
  }
}

// Nearest finite e4m3 value by search (ties to the even code), saturating to +-448.
uint8_t brute_force_encode(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_d = INFINITY;
  for (int b = 0; b < 0x7f; ++b) {
    const double d = std::fabs(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(b))) - a);
    if (d < best_d || (d == best_d && b % 2 == 0)) best = b, best_d = d;
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8E4m3, MatchesABruteForceEncoderOnMidpointsAndRandomValues) {
  std::vector<float> xs;
  for (int b = 0; b < 0x7e; ++b) {  // every midpoint between neighbours and its float neighbours
    const float lo = e4m3_to_float(static_cast<uint8_t>(b)),
                hi = e4m3_to_float(static_cast<uint8_t>(b + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both are short binary fractions
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> log2mag(-12.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(log2mag(rng));
    xs.push_back(rng() % 2 ? x : -x);
  }
  for (float x : xs) ASSERT_EQ(e4m3_from_float(x), brute_force_encode(x)) << "x = " << x;
}

TEST(Fp8E4m3, RoundTripAppliesTheScale) {
  EXPECT_EQ(e4m3_round_trip(1.06f, 1.0f), 1.0f);
  EXPECT_EQ(e4m3_round_trip(3.0f, 0.5f), 3.0f);        // 6 is exact
  EXPECT_EQ(e4m3_round_trip(1000.0f, 4.0f), 1024.0f);  // 250 lies nearer 256 than 240
  EXPECT_EQ(e4m3_round_trip(1e4f, 2.0f), 896.0f);      // saturates at 448 * scale
}

}  // namespace
}  // namespace rill::fp8
