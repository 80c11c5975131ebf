#include "engine/runner/sampling_fields.h"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "engine/error.h"

namespace rill {
namespace {

constexpr double kInt32Max = std::numeric_limits<int32_t>::max();

// OpenAI's ranges where it has them (temperature's upper bound is Rill's), vLLM's otherwise.
constexpr std::array<SamplingField, 8> kFields = {{
    {"temperature", &SamplingParams::temperature, 0, 100, false, std::nullopt, true,
     "softmax temperature; 0 is greedy (argmax, lowest id on ties)"},
    {"top_k", &SamplingParams::top_k, 0, kInt32Max, false, -1.0, true,
     "keep the k most likely tokens; 0 or -1: off"},
    {"top_p", &SamplingParams::top_p, 0, 1, true, std::nullopt, true,
     "keep the smallest set of tokens (within top_k) whose probability reaches p; 1: off"},
    {"min_p", &SamplingParams::min_p, 0, 1, false, std::nullopt, true,
     "drop tokens less likely than min_p times the most likely one; 0: off"},
    {"repetition_penalty", &SamplingParams::repetition_penalty, 0.01, 100, false, std::nullopt,
     true,
     "divides positive (multiplies negative) logits of tokens in the prompt or output; 1: off"},
    {"presence_penalty", &SamplingParams::presence_penalty, -2, 2, false, std::nullopt, false,
     "subtracted once from the logit of every token already generated; 0: off"},
    {"frequency_penalty", &SamplingParams::frequency_penalty, -2, 2, false, std::nullopt, false,
     "subtracted per occurrence from the logit of every token already generated; 0: off"},
    {"seed", &SamplingParams::seed, 0, 0, false, std::nullopt, false,
     "random seed: the same seed and inputs give the same tokens, on either engine, in any batch"},
}};

// Adding a SamplingParams member without its row here would leave it unparsed, unvalidated and
// undocumented: the size of the struct is pinned to the rows above (7 x 4 bytes + padding + 8).
static_assert(sizeof(SamplingParams) == 40,
              "SamplingParams changed: add the new member's row to kFields and update this size");
static_assert(kFields.size() <= 32, "SamplingOverrides keeps one bit per field in a uint32_t");

[[noreturn]] void bad(const SamplingField& f, const std::string& why) {
  throw FieldError(f.name, "'" + std::string(f.name) + "' must be " + why);
}

// "in [0, 100]", "-1 (off) or in [0, 2147483647]", "an integer in [-2^63, 2^64)".
std::string requirement(const SamplingField& f) {
  const std::string range = sampling_range_text(f);
  if (sampling_field_type(f) == SamplingFieldType::kUint64) return "an integer in " + range;
  if (f.off_alias) {
    const std::string alias = format_sampling_number(*f.off_alias) + " (off) or ";
    return alias + "in " + range.substr(range.find(" or ") + 4);
  }
  return "in " + range;
}

double as_double(const SamplingNumber& v) {
  return std::visit([](auto x) { return static_cast<double>(x); }, v);
}

bool in_range(const SamplingField& f, double x) {
  return (f.lo_open ? x > f.lo : x >= f.lo) && x <= f.hi;
}

// A float field is checked as the float it is stored as, so 0.01 sent as a JSON double and as a
// proto float (0.0099999998) are the same value on both protocols.
float checked_float(const SamplingField& f, const SamplingNumber& v, bool allow_alias) {
  const double d = as_double(v);
  if (allow_alias && f.off_alias && d == *f.off_alias)
    return static_cast<float>(std::get<double>(default_sampling_value(f)));
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) bad(f, requirement(f));
  const float x = static_cast<float>(d);
  const auto lo = static_cast<float>(f.lo), hi = static_cast<float>(f.hi);
  if (!((f.lo_open ? x > lo : x >= lo) && x <= hi)) bad(f, requirement(f));
  return x;
}

// An integer from any number kind: doubles must be integral ("must be an integer").
// Returns nullopt when outside [-2^63, 2^63).
std::optional<int64_t> as_int64(const SamplingField& f, const SamplingNumber& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  const double d = std::get<double>(v);
  if (!std::isfinite(d) || d != std::floor(d)) bad(f, "an integer");
  if (d < -0x1p63 || d >= 0x1p63) return std::nullopt;
  return static_cast<int64_t>(d);
}

int32_t checked_int32(const SamplingField& f, const SamplingNumber& v, bool allow_alias) {
  const std::optional<int64_t> x = as_int64(f, v);
  if (x && allow_alias && f.off_alias && static_cast<double>(*x) == *f.off_alias)
    return static_cast<int32_t>(std::get<double>(default_sampling_value(f)));
  if (!x || !in_range(f, static_cast<double>(*x))) bad(f, requirement(f));
  return static_cast<int32_t>(*x);
}

// Every uint64 is valid; a negative integer down to -2^63 is taken as its two's complement
// (OpenAI clients send signed 64-bit seeds).
uint64_t checked_uint64(const SamplingField& f, const SamplingNumber& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<uint64_t>(*i);
  const double d = std::get<double>(v);
  if (!std::isfinite(d) || d != std::floor(d)) bad(f, "an integer");
  if (d < -0x1p63 || d >= 0x1p64) bad(f, requirement(f));
  return d < 0 ? static_cast<uint64_t>(static_cast<int64_t>(d)) : static_cast<uint64_t>(d);
}

void check_and_store(SamplingParams& p, const SamplingField& f, const SamplingNumber& v,
                     bool allow_alias) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(p.*member)>;
        if constexpr (std::is_same_v<T, float>)
          p.*member = checked_float(f, v, allow_alias);
        else if constexpr (std::is_same_v<T, int32_t>)
          p.*member = checked_int32(f, v, allow_alias);
        else
          p.*member = checked_uint64(f, v);
      },
      f.member);
}

size_t field_index(const SamplingField& f) {
  const auto all = sampling_fields();
  if (&f < all.data() || &f >= all.data() + all.size())
    throw Error(ErrorCode::kInternal, "sampling field not from sampling_fields()");
  return static_cast<size_t>(&f - all.data());
}

}  // namespace

std::span<const SamplingField> sampling_fields() {
  return kFields;
}

const SamplingField* find_sampling_field(std::string_view name) {
  for (const SamplingField& f : kFields)
    if (name == f.name) return &f;
  return nullptr;
}

SamplingFieldType sampling_field_type(const SamplingField& f) {
  return static_cast<SamplingFieldType>(f.member.index());
}

const char* sampling_field_type_name(const SamplingField& f) {
  switch (sampling_field_type(f)) {
    case SamplingFieldType::kFloat:
      return "float";
    case SamplingFieldType::kInt32:
      return "int32";
    case SamplingFieldType::kUint64:
      return "uint64";
  }
  return "?";
}

std::string sampling_range_text(const SamplingField& f) {
  if (sampling_field_type(f) == SamplingFieldType::kUint64) return "[-2^63, 2^64)";
  std::string range;
  if (f.off_alias) range.append(format_sampling_number(*f.off_alias)).append(" or ");
  range.append(f.lo_open ? "(" : "[").append(format_sampling_number(f.lo)).append(", ");
  return range.append(format_sampling_number(f.hi)).append("]");
}

void set_sampling_field(SamplingParams& p, const SamplingField& f, const SamplingNumber& value) {
  check_and_store(p, f, value, /*allow_alias=*/true);
}

SamplingNumber get_sampling_field(const SamplingParams& p, const SamplingField& f) {
  return std::visit(
      [&](auto member) -> SamplingNumber {
        using T = std::remove_cvref_t<decltype(p.*member)>;
        if constexpr (std::is_same_v<T, uint64_t>)
          return p.*member;
        else
          return static_cast<double>(p.*member);
      },
      f.member);
}

SamplingNumber default_sampling_value(const SamplingField& f) {
  return get_sampling_field(SamplingParams{}, f);
}

std::string format_sampling_number(const SamplingNumber& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  const double d = std::get<double>(v);
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15)
    return std::to_string(static_cast<int64_t>(d));
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

void SamplingParams::validate() const {
  SamplingParams scratch;
  for (const SamplingField& f : kFields)
    check_and_store(scratch, f, get_sampling_field(*this, f), /*allow_alias=*/false);
}

void SamplingOverrides::set(const SamplingField& f, const SamplingNumber& value) {
  set_sampling_field(values_, f, value);
  set_mask_ |= uint32_t{1} << field_index(f);
}

bool SamplingOverrides::has(const SamplingField& f) const {
  return (set_mask_ >> field_index(f)) & 1u;
}

void SamplingOverrides::apply_to(SamplingParams& p) const {
  for (const SamplingField& f : kFields)
    if (has(f)) std::visit([&](auto member) { p.*member = values_.*member; }, f.member);
}

SamplingParams resolve_sampling_defaults(const SamplingOverrides& server,
                                         const SamplingOverrides& model) {
  SamplingParams p;  // OpenAI's defaults
  model.apply_to(p);
  server.apply_to(p);
  return p;
}

}  // namespace rill
