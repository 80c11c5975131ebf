// The one list of sampling fields: name, type, default, range and documentation of every
// SamplingParams member, as plain data. Everything else derives from it:
//   - validation (SamplingParams::validate, set_sampling_field), used by both protocols and the
//     tools, so HTTP, gRPC and the command line accept and refuse the same values with the same
//     message;
//   - HTTP parsing and the session "defaults" object (server/sampling_json.cc);
//   - gRPC conversion, by field name through protobuf reflection (server/grpc_convert.cc);
//   - the tools' command-line flags (tools/common/engine_flags.cc);
//   - the model's defaults from generation_config.json (engine/model/model.cc);
//   - the field table of docs/api.md (checked by tests/engine/sampling_fields_test.cc).
// A new sampling parameter is a SamplingParams member, a row in sampling_fields(), a field of the
// same name in rill.proto's SamplingParameters, the CPU sampler (sampling.cc), the GPU sampler
// (kernels/src/sampling.cu, fed by engine/cuda/step_meta.cc) and their tests.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "engine/runner/sampling.h"

namespace rill {

/// The stored type of a field (float, int32 or uint64 member of SamplingParams).
using SamplingMember =
    std::variant<float SamplingParams::*, int32_t SamplingParams::*, uint64_t SamplingParams::*>;

enum class SamplingFieldType { kFloat, kInt32, kUint64 };

/// A number as a client sent it: a JSON number, a proto scalar or a parsed flag. Integers keep
/// their exact value (a uint64 seed does not fit a double).
using SamplingNumber = std::variant<double, int64_t, uint64_t>;

struct SamplingField {
  const char* name;       // JSON key, proto field name; the tools' flag is --name with '-' for '_'
  SamplingMember member;  // where SamplingParams keeps it (its initializer is the default)
  double lo = 0, hi = 0;  // valid stored values; unused for kUint64 (every value is valid)
  bool lo_open = false;   // (lo, hi] instead of [lo, hi]
  // Also accepted, meaning off, and stored as the default (vLLM's top_k -1).
  std::optional<double> off_alias;
  bool in_generation_config = false;  // read from generation_config.json under the same key
  const char* doc;                    // one line for docs and --help
};

/// Every sampling field, in SamplingParams order.
std::span<const SamplingField> sampling_fields();
/// The field called `name`, or nullptr.
const SamplingField* find_sampling_field(std::string_view name);
SamplingFieldType sampling_field_type(const SamplingField& f);
/// "float", "int32" or "uint64".
const char* sampling_field_type_name(const SamplingField& f);

/// The accepted values as messages and docs write them: "[0, 100]", "(0, 1]",
/// "-1 or [0, 2147483647]", "[-2^63, 2^64)" (uint64: a negative integer is taken as its two's
/// complement, as OpenAI clients send signed seeds).
std::string sampling_range_text(const SamplingField& f);

/// Checks `value` against f's range and type and writes it into `p` (an off alias as the default).
/// The one validation of every sampling value a client sends. Throws
/// FieldError(f.name, "'name' must be in [lo, hi]") or "'name' must be an integer".
void set_sampling_field(SamplingParams& p, const SamplingField& f, const SamplingNumber& value);
/// f's value in `p`: double for float and int32 fields, uint64_t for uint64 ones.
SamplingNumber get_sampling_field(const SamplingParams& p, const SamplingField& f);
/// f's value in a default-constructed SamplingParams (OpenAI's defaults).
SamplingNumber default_sampling_value(const SamplingField& f);
/// A number as text: integers without a fraction, others in the shortest form that reads back.
std::string format_sampling_number(const SamplingNumber& v);

/// The sampling fields one source of defaults sets (the server's override, the model's
/// generation_config.json); the fields it leaves out fall through to the next source.
class SamplingOverrides {
 public:
  /// Checked like a request's value (set_sampling_field).
  void set(const SamplingField& f, const SamplingNumber& value);
  bool has(const SamplingField& f) const;
  bool empty() const { return set_mask_ == 0; }
  /// Writes the fields set here over `p`.
  void apply_to(SamplingParams& p) const;
  /// The values (fields not set hold their defaults).
  const SamplingParams& values() const { return values_; }

 private:
  SamplingParams values_;
  uint32_t set_mask_ = 0;  // bit i: sampling_fields()[i] is set
};

/// The defaults a request starts from, in precedence order after the request itself: the
/// server's override, then the model's generation_config.json, then OpenAI's (SamplingParams{}).
SamplingParams resolve_sampling_defaults(const SamplingOverrides& server,
                                         const SamplingOverrides& model);

}  // namespace rill
