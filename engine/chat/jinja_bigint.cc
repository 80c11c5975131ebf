#include "engine/chat/jinja_bigint.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/chat/jinja_error.h"

namespace rill::jinja {
namespace {

using Limbs = std::vector<uint32_t>;

void trim_limbs(Limbs& limbs) {
  while (!limbs.empty() && limbs.back() == 0) limbs.pop_back();
}

Limbs from_uint64(uint64_t v) {
  Limbs out;
  while (v != 0) {
    out.push_back(static_cast<uint32_t>(v));
    v >>= 32;
  }
  return out;
}

size_t magnitude_bits(const Limbs& limbs) {
  if (limbs.empty()) return 0;
  return 32 * (limbs.size() - 1) + (32 - static_cast<size_t>(__builtin_clz(limbs.back())));
}

bool bit_at(const Limbs& limbs, size_t bit) {
  return (limbs[bit / 32] >> (bit % 32)) & 1u;
}

Limbs shift_limbs_left(const Limbs& limbs, size_t bits) {
  if (limbs.empty()) return {};
  Limbs out(bits / 32, 0);
  const unsigned s = bits % 32;
  uint32_t carry = 0;
  for (uint32_t limb : limbs) {
    out.push_back(s == 0 ? limb : (limb << s) | carry);
    carry = s == 0 ? 0 : limb >> (32 - s);
  }
  if (carry != 0) out.push_back(carry);
  return out;
}

Limbs multiply_magnitude(const Limbs& a, const Limbs& b) {
  if (a.empty() || b.empty()) return {};
  Limbs out(a.size() + b.size(), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    uint64_t carry = 0;
    for (size_t j = 0; j < b.size(); ++j) {
      const uint64_t t = static_cast<uint64_t>(a[i]) * b[j] + out[i + j] + carry;
      out[i + j] = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    out[i + b.size()] = static_cast<uint32_t>(carry);
  }
  trim_limbs(out);
  return out;
}

}  // namespace

BigInt::BigInt(int64_t v) : negative_(v < 0) {
  // Two's complement negation in unsigned arithmetic handles INT64_MIN.
  const uint64_t magnitude = v < 0 ? ~static_cast<uint64_t>(v) + 1 : static_cast<uint64_t>(v);
  limbs_ = from_uint64(magnitude);
}

std::optional<BigInt> BigInt::parse(std::string_view text) {
  BigInt out;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (text.empty()) return std::nullopt;
  // 4300 digits is Python's default limit for str -> int; more is refused before any work.
  if (text.size() > 4300) fail("integer literal too large (more than 4300 digits)");
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t carry = static_cast<uint64_t>(c - '0');
    for (uint32_t& limb : out.limbs_) {
      const uint64_t t = static_cast<uint64_t>(limb) * 10 + carry;
      limb = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    if (carry != 0) out.limbs_.push_back(static_cast<uint32_t>(carry));
  }
  out.trim();
  out.negative_ = negative && !out.is_zero();
  return out;
}

BigInt BigInt::from_double(double integral) {
  BigInt out;
  if (integral == 0.0) return out;
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(integral), &exponent);  // [0.5, 1) * 2^exponent
  const auto mantissa = static_cast<uint64_t>(std::ldexp(fraction, 53));
  const int shift = exponent - 53;
  if (shift >= 0) {
    out.limbs_ = shift_limbs_left(from_uint64(mantissa), static_cast<size_t>(shift));
  } else {
    out.limbs_ = from_uint64(mantissa >> -shift);  // exact: the value is integral
  }
  out.negative_ = integral < 0;
  out.trim();
  return out;
}

bool BigInt::fits_int64() const {
  if (limbs_.size() > 2) return false;
  uint64_t m = 0;
  for (size_t i = limbs_.size(); i-- > 0;) m = (m << 32) | limbs_[i];
  return negative_ ? m <= (uint64_t{1} << 63) : m < (uint64_t{1} << 63);
}

int64_t BigInt::to_int64() const {
  uint64_t m = 0;
  for (size_t i = limbs_.size(); i-- > 0;) m = (m << 32) | limbs_[i];
  return negative_ ? static_cast<int64_t>(~m + 1) : static_cast<int64_t>(m);
}

double BigInt::to_double() const {
  const size_t bits = bit_length();
  if (bits == 0) return 0.0;
  uint64_t top = 0;  // the highest 64 bits
  size_t shift = 0;
  if (bits <= 64) {
    for (size_t i = limbs_.size(); i-- > 0;) top = (top << 32) | limbs_[i];
  } else {
    shift = bits - 64;
    bool sticky = false;
    for (size_t b = 0; b < shift && !sticky; ++b) sticky = bit_at(limbs_, b);
    for (size_t b = 0; b < 64; ++b) top |= static_cast<uint64_t>(bit_at(limbs_, shift + b)) << b;
    // Bit 0 lies 11 bits below double precision: setting it breaks exact ties upwards when
    // lower, discarded bits were non-zero, so the one hardware rounding is correct.
    if (sticky) top |= 1;
  }
  const double magnitude = std::ldexp(static_cast<double>(top), static_cast<int>(shift));
  return negative_ ? -magnitude : magnitude;
}

std::string BigInt::to_string() const {
  if (is_zero()) return "0";
  Limbs work = limbs_;
  std::vector<uint32_t> chunks;  // base 10^9, least significant first
  while (!work.empty()) chunks.push_back(divide_small(work, 1000000000u));
  std::string out = negative_ ? "-" : "";
  out += std::to_string(chunks.back());
  for (size_t i = chunks.size() - 1; i-- > 0;) {
    const std::string part = std::to_string(chunks[i]);
    out += std::string(9 - part.size(), '0') + part;
  }
  return out;
}

std::string BigInt::magnitude_in_base(int base) const {
  if (is_zero()) return "0";
  const unsigned bits_per_digit = base == 2 ? 1 : base == 8 ? 3 : 4;
  const size_t total = bit_length();
  std::string out;
  for (size_t at = 0; at < total; at += bits_per_digit) {
    unsigned digit = 0;
    for (unsigned b = 0; b < bits_per_digit && at + b < total; ++b)
      digit |= static_cast<unsigned>(bit_at(limbs_, at + b)) << b;
    out += "0123456789abcdef"[digit];
  }
  std::reverse(out.begin(), out.end());
  return out;
}

size_t BigInt::bit_length() const {
  return magnitude_bits(limbs_);
}

BigInt BigInt::operator-() const {
  BigInt out = *this;
  out.negative_ = !negative_ && !is_zero();
  return out;
}

BigInt operator+(const BigInt& a, const BigInt& b) {
  BigInt out;
  if (a.negative_ == b.negative_) {
    out.limbs_ = BigInt::add_magnitude(a.limbs_, b.limbs_);
    out.negative_ = a.negative_;
  } else if (BigInt::compare_magnitude(a.limbs_, b.limbs_) >= 0) {
    out.limbs_ = BigInt::sub_magnitude(a.limbs_, b.limbs_);
    out.negative_ = a.negative_;
  } else {
    out.limbs_ = BigInt::sub_magnitude(b.limbs_, a.limbs_);
    out.negative_ = b.negative_;
  }
  out.trim();
  out.check_size();
  return out;
}

BigInt operator-(const BigInt& a, const BigInt& b) {
  return a + (-b);
}

BigInt operator*(const BigInt& a, const BigInt& b) {
  if (a.bit_length() + b.bit_length() > kMaxBigIntBits + 1)
    fail("integer result too large (more than 4300 digits)");
  BigInt out;
  out.limbs_ = multiply_magnitude(a.limbs_, b.limbs_);
  out.negative_ = a.negative_ != b.negative_;
  out.trim();
  out.check_size();
  return out;
}

void BigInt::divmod_floor(const BigInt& a, const BigInt& b, BigInt& quotient, BigInt& remainder) {
  // Binary long division of the magnitudes: O(bits(a) * limbs(b)), fine at these sizes.
  Limbs q(a.limbs_.size(), 0), r;
  for (size_t bit = a.bit_length(); bit-- > 0;) {
    r = shift_limbs_left(r, 1);
    if (bit_at(a.limbs_, bit)) {
      if (r.empty()) r.push_back(0);
      r[0] |= 1;
    }
    if (compare_magnitude(r, b.limbs_) >= 0) {
      r = sub_magnitude(r, b.limbs_);
      q[bit / 32] |= 1u << (bit % 32);
    }
  }
  quotient = BigInt();
  quotient.limbs_ = std::move(q);
  quotient.negative_ = a.negative_ != b.negative_;
  quotient.trim();
  remainder = BigInt();
  remainder.limbs_ = std::move(r);
  remainder.negative_ = a.negative_;
  remainder.trim();
  // Truncated -> floored: a remainder of the other sign than b moves one step down.
  if (!remainder.is_zero() && remainder.negative_ != b.negative_) {
    quotient = quotient - BigInt(1);
    remainder = remainder + b;
  }
}

BigInt BigInt::pow(const BigInt& a, uint64_t exponent) {
  if (exponent == 0) return BigInt(1);
  const size_t bits = a.bit_length();
  if (bits > 1 && (exponent > kMaxBigIntBits || (bits - 1) * exponent > kMaxBigIntBits))
    fail("integer result too large (more than 4300 digits)");
  BigInt result(1), base = a;
  for (uint64_t e = exponent; e > 0; e >>= 1) {
    if (e & 1) result = result * base;
    if (e > 1) base = base * base;
  }
  return result;
}

BigInt BigInt::shift_left(const BigInt& a, size_t bits) {
  BigInt out;
  out.limbs_ = shift_limbs_left(a.limbs_, bits);
  out.negative_ = a.negative_;
  out.trim();
  return out;
}

int BigInt::compare(const BigInt& a, const BigInt& b) {
  if (a.negative_ != b.negative_) return a.negative_ ? -1 : 1;
  const int c = compare_magnitude(a.limbs_, b.limbs_);
  return a.negative_ ? -c : c;
}

int BigInt::compare_magnitude(const Limbs& a, const Limbs& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  for (size_t i = a.size(); i-- > 0;)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

Limbs BigInt::add_magnitude(const Limbs& a, const Limbs& b) {
  Limbs out;
  uint64_t carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const uint64_t t = (i < a.size() ? a[i] : 0ull) + (i < b.size() ? b[i] : 0ull) + carry;
    out.push_back(static_cast<uint32_t>(t));
    carry = t >> 32;
  }
  if (carry != 0) out.push_back(static_cast<uint32_t>(carry));
  return out;
}

Limbs BigInt::sub_magnitude(const Limbs& a, const Limbs& b) {
  Limbs out;
  int64_t borrow = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t t = static_cast<int64_t>(a[i]) - (i < b.size() ? b[i] : 0) - borrow;
    borrow = t < 0;
    if (t < 0) t += int64_t{1} << 32;
    out.push_back(static_cast<uint32_t>(t));
  }
  trim_limbs(out);
  return out;
}

uint32_t BigInt::divide_small(Limbs& limbs, uint32_t divisor) {
  uint64_t rem = 0;
  for (size_t i = limbs.size(); i-- > 0;) {
    const uint64_t cur = (rem << 32) | limbs[i];
    limbs[i] = static_cast<uint32_t>(cur / divisor);
    rem = cur % divisor;
  }
  trim_limbs(limbs);
  return static_cast<uint32_t>(rem);
}

void BigInt::trim() {
  trim_limbs(limbs_);
  if (limbs_.empty()) negative_ = false;
}

void BigInt::check_size() const {
  if (bit_length() > kMaxBigIntBits) fail("integer result too large (more than 4300 digits)");
}

}  // namespace rill::jinja
