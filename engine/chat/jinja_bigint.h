// Arbitrary-precision integers for the Jinja interpreter: Python's ints never overflow, so
// `2 ** 64`, `9223372036854775807 + 1` or a 30-digit literal must give the exact value. Values
// that fit in int64 stay int64 (Value normalizes); BigInt holds the rest. Sizes are bounded by
// kMaxBigIntBits (about Python's default limit of 4300 digits for int <-> str conversions), so
// no template can exhaust memory or time with `10 ** 10 ** 8`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rill::jinja {

/// Results larger than this raise "integer too large" (4300 decimal digits need 14,284 bits).
inline constexpr size_t kMaxBigIntBits = 14300;

class BigInt {
 public:
  BigInt() = default;
  explicit BigInt(int64_t v);

  /// Decimal digits with an optional sign ("-123"); nullopt if malformed. Throws TemplateError
  /// past kMaxBigIntBits.
  static std::optional<BigInt> parse(std::string_view text);
  /// The exact value of an integral, finite double.
  static BigInt from_double(double integral);

  bool negative() const { return negative_; }
  bool is_zero() const { return limbs_.empty(); }
  bool fits_int64() const;
  /// Only when fits_int64().
  int64_t to_int64() const;
  /// Correctly rounded (half to even), as Python's float(int); +-inf when out of range.
  double to_double() const;
  std::string to_string() const;
  /// Digits in base 2, 8 or 16 without prefix or sign, for %x / %o formatting.
  std::string magnitude_in_base(int base) const;
  size_t bit_length() const;

  BigInt operator-() const;
  friend BigInt operator+(const BigInt& a, const BigInt& b);
  friend BigInt operator-(const BigInt& a, const BigInt& b);
  friend BigInt operator*(const BigInt& a, const BigInt& b);
  /// Python's floor division and modulo (the remainder takes the divisor's sign). b != 0.
  static void divmod_floor(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder);
  /// a ** exponent, exponent >= 0; throws TemplateError when the result would be too large.
  static BigInt pow(const BigInt& a, uint64_t exponent);
  /// -1, 0, 1.
  static int compare(const BigInt& a, const BigInt& b);
  /// a * 2^bits without the size limit: for intermediate values whose size the caller bounds.
  static BigInt shift_left(const BigInt& a, size_t bits);

 private:
  // |a| vs |b|.
  static int compare_magnitude(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b);
  static std::vector<uint32_t> add_magnitude(const std::vector<uint32_t>& a,
                                             const std::vector<uint32_t>& b);
  // a - b with |a| >= |b|.
  static std::vector<uint32_t> sub_magnitude(const std::vector<uint32_t>& a,
                                             const std::vector<uint32_t>& b);
  // Divides the magnitude in place by a small divisor, returning the remainder.
  static uint32_t divide_small(std::vector<uint32_t>& limbs, uint32_t divisor);
  void trim();
  void check_size() const;

  bool negative_ = false;
  std::vector<uint32_t> limbs_;  // magnitude, little-endian base 2^32, no leading zero limbs
};

}  // namespace rill::jinja
