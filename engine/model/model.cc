#include "engine/model/model.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/llama2c.h"
#include "engine/model/safetensors.h"

namespace rill {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

Model load_hf(const fs::path& dir) {
  Model m;
  m.path = dir;
  m.config = load_hf_config(dir / "config.json");
  auto tensors = load_safetensors_dir(dir);
  attach_fp8_scales(m.config.quant, tensors, dir.string());
  m.weights = map_hf_weights(m.config, tensors, dir.string());
  if (!fs::exists(dir / "tokenizer.json"))
    throw Error(ErrorCode::kNotFound, dir.string() + ": no tokenizer.json");
  m.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_hf_dir(dir));
  m.generation = load_generation_config(dir / "generation_config.json");
  return m;
}

Model load_llama2c_model(const fs::path& bin) {
  Model m;
  m.path = bin;
  Llama2cCheckpoint ck = load_llama2c(bin);
  m.config = std::move(ck.config);
  m.weights = std::move(ck.weights);
  const fs::path tok = bin.parent_path() / "tokenizer.bin";
  if (!fs::exists(tok)) throw Error(ErrorCode::kNotFound, tok.string() + ": llama2.c tokenizer not found");
  m.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_llama2c(tok, m.config.vocab_size));
  m.generation.eos_token_ids = m.config.eos_token_ids;
  return m;
}

}  // namespace

GenerationDefaults load_generation_config(const fs::path& file) {
  GenerationDefaults g;
  if (!fs::exists(file)) return g;
  json j;
  try {
    std::ifstream in(file);
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, file.string() + ": " + e.what());
  }
  if (!j.is_object())
    throw Error(ErrorCode::kInvalidArgument, file.string() + ": expected a JSON object");
  const bool greedy =
      j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>();
  try {
    for (const SamplingField& f : sampling_fields()) {
      if (!f.in_generation_config || !j.contains(f.name) || !j[f.name].is_number()) continue;
      // Greedy decoding ignores the kept-set fields; penalties still apply.
      if (greedy && std::string_view(f.name) != "repetition_penalty") continue;
      const json& v = j[f.name];
      g.sampling.set(f, v.is_number_unsigned()  ? SamplingNumber(v.get<uint64_t>())
                        : v.is_number_integer() ? SamplingNumber(v.get<int64_t>())
                                                : SamplingNumber(v.get<double>()));
    }
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, file.string() + ": " + e.what());
  }
  if (greedy) g.sampling.set(*find_sampling_field("temperature"), 0.0);
  if (j.contains("max_new_tokens") && j["max_new_tokens"].is_number_integer())
    g.max_new_tokens = j["max_new_tokens"].get<int>();
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) g.eos_token_ids.push_back(e.get<int>());
    if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) g.eos_token_ids.push_back(x.get<int>());
  }
  return g;
}

std::vector<int> Model::stop_token_ids() const {
  std::vector<int> ids = config.eos_token_ids;
  ids.insert(ids.end(), generation.eos_token_ids.begin(), generation.eos_token_ids.end());
  if (tokenizer && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::optional<int> Model::bos_token_id() const {
  if (tokenizer && tokenizer->bos_id()) return *tokenizer->bos_id();
  return config.bos_token_id;
}

Model load_model(const fs::path& path) {
  if (!fs::exists(path)) throw Error(ErrorCode::kNotFound, path.string() + ": no such file or directory");
  if (fs::is_directory(path)) {
    if (fs::exists(path / "config.json")) return load_hf(path);
    if (fs::exists(path / "model.bin")) return load_llama2c_model(path / "model.bin");
    throw Error(ErrorCode::kNotFound, path.string() + ": no config.json (Hugging Face) or model.bin (llama2.c)");
  }
  return load_llama2c_model(path);
}

}  // namespace rill
