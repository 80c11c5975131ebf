// Golden references written by tools/make_golden.py and tools/streaming_reference.py
// (transformers / an independent PyTorch implementation), read by the engine tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rill::testing {

/// `rel` under the source tree: $RILL_SOURCE_DIR when set (binaries run from another checkout,
/// as on the GPU machine), else the tree this test was built from.
inline std::filesystem::path source_path(const std::string& rel) {
  const char* env = std::getenv("RILL_SOURCE_DIR");
  return std::filesystem::path(env && *env ? env : RILL_SOURCE_DIR) / rel;
}

inline nlohmann::json load_golden(const std::string& name) {
  const auto p = source_path("tests/golden/" + name);
  std::ifstream in(p);
  if (!in)
    throw std::runtime_error("missing golden file " + p.string() +
                             " (tools/make_golden.py writes it: see its --only for one fixture)");
  return nlohmann::json::parse(in);
}

struct GoldenCase {
  std::vector<int32_t> prompt, greedy;
  std::vector<std::vector<float>> logits;  // first steps
  std::vector<double> margins;             // top-1 minus top-2 logit per greedy step
};

inline std::vector<GoldenCase> golden_cases(const nlohmann::json& g) {
  std::vector<GoldenCase> out;
  for (const auto& c : g.at("cases"))
    out.push_back({c.at("prompt_ids").get<std::vector<int32_t>>(), c.at("greedy_ids").get<std::vector<int32_t>>(),
                   c.at("logits").get<std::vector<std::vector<float>>>(), c.at("margins").get<std::vector<double>>()});
  return out;
}

/// The fixture checkpoints under tests/fixtures, one per supported architecture, and one per
/// head_dim the CUDA kernels take besides 64 (gpt_neox_hd80: GPT-NeoX, head_dim 80, 25% rotary;
/// llama_hd96: Llama, head_dim 96, GQA). A fixture whose files are missing fails its tests
/// (load_golden names the file and the script that writes it); none is skipped.
inline std::vector<std::string> fixture_names() {
  return {"llama_gqa_tied", "llama3_rope_scaling", "mistral",     "qwen2",    "gpt_neox",
          "gpt_neox_sequential", "llama2c",       "gpt_neox_hd80", "llama_hd96"};
}

}  // namespace rill::testing
