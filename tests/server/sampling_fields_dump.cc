// Prints the table of sampling fields (engine/runner/sampling_fields.h) as JSON for the
// end-to-end tests (sampling_agreement_test.py), so a new row is tested on both protocols
// without editing them: [{"name", "type", "default", "lo", "hi", "lo_open", "off_alias",
// "in_generation_config", "range"}].
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/runner/sampling_fields.h"

int main() {
  using nlohmann::json;
  json out = json::array();
  for (const rill::SamplingField& f : rill::sampling_fields()) {
    const rill::SamplingNumber d = rill::default_sampling_value(f);
    json row = {{"name", f.name},
                {"type", rill::sampling_field_type_name(f)},
                {"default", std::holds_alternative<uint64_t>(d) ? json(std::get<uint64_t>(d))
                                                                : json(std::get<double>(d))},
                {"lo", f.lo},
                {"hi", f.hi},
                {"lo_open", f.lo_open},
                {"off_alias", f.off_alias ? json(*f.off_alias) : json(nullptr)},
                {"in_generation_config", f.in_generation_config},
                {"range", rill::sampling_range_text(f)}};
    out.push_back(row);
  }
  std::puts(out.dump(1).c_str());
  return 0;
}
