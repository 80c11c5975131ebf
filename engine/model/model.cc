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

GenerationDefaults load_generation_config(const fs::path& file) {
  GenerationDefaults g;
  if (!fs::exists(file)) return g;
  json j;
  try {
    std::ifstream in(file);
    j = json::parse(in);
    g.do_sample = j.value("do_sample", false);
    if (j.contains("temperature") && j["temperature"].is_number()) g.temperature = j["temperature"].get<float>();
    if (j.contains("top_k") && j["top_k"].is_number()) g.top_k = j["top_k"].get<int>();
    if (j.contains("top_p") && j["top_p"].is_number()) g.top_p = j["top_p"].get<float>();
    if (j.contains("min_p") && j["min_p"].is_number()) g.min_p = j["min_p"].get<float>();
    if (j.contains("repetition_penalty") && j["repetition_penalty"].is_number())
      g.repetition_penalty = j["repetition_penalty"].get<float>();
    if (j.contains("max_new_tokens") && j["max_new_tokens"].is_number_integer())
      g.max_new_tokens = j["max_new_tokens"].get<int>();
    if (j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) g.eos_token_ids.push_back(e.get<int>());
      if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) g.eos_token_ids.push_back(x.get<int>());
    }
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, file.string() + ": " + e.what());
  }
  return g;
}

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
