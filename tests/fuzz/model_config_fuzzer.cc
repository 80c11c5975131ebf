// The model-config loader (engine/model/model_config.cc): a config.json's text parsed and read
// as load_hf_config reads it (transformers 4.x and 5.x spellings, RoPE settings), then the RoPE
// frequencies a runner computes from it. Any problem must be a rill::Error naming the file;
// anything else escaping, or a sanitizer report (an integer or float-to-int overflow), is a bug.
//
// Seeds: tests/fuzz/corpus/model_config plus the config.json of the default model and of every
// model fixture (scripts/test_fuzz.sh passes them); dictionary: json.dict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // load_hf_config: "malformed JSON"
  try {
    const rill::ModelConfig c = rill::parse_hf_config(j, "config.json");
    // The runner's RoPE table: one entry per pair of rotary dims (bounded by head_dim).
    if (c.rope.rotary_dim <= 1 << 16) c.rope.inv_freq();
  } catch (const rill::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "config.json: a %s escaped, not a rill::Error: %s\n", typeid(e).name(),
                 e.what());
    std::abort();
  }
  return 0;
}
