// rill-make-model: writes a random-initialised checkpoint in the same format as real ones
// (config.json, model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json),
// so 7-8B-scale benchmarks need no download.
//   rill-make-model --config llama2-7b --out /tmp/llama2-7b
//   rill-make-model --config path/to/config.json --out DIR
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/model/dtype.h"
#include "engine/error.h"
#include "engine/model/model_config.h"
#include "tools/common/args.h"

using namespace rill;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json preset(const std::string& name) {
  json base = {{"rms_norm_eps", 1e-5}, {"hidden_act", "silu"}, {"tie_word_embeddings", false},
               {"bos_token_id", 1}, {"eos_token_id", 2}, {"torch_dtype", "float16"}};
  auto with = [&](json extra) {
    json j = base;
    j.update(extra);
    return j;
  };
  if (name == "llama2-7b")
    return with({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4096}, {"intermediate_size", 11008},
                 {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 32},
                 {"vocab_size", 32000}, {"max_position_embeddings", 4096}, {"rope_theta", 10000.0}});
  if (name == "llama3-8b")
    return with({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4096}, {"intermediate_size", 14336},
                 {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                 {"vocab_size", 128256}, {"max_position_embeddings", 8192}, {"rope_theta", 500000.0},
                 {"bos_token_id", 128000}, {"eos_token_id", 128001}, {"torch_dtype", "bfloat16"}});
  if (name == "llama3-70b")  // the tensor-parallel targets' shape (issue 32): 141 GB in bf16
    return with({{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 8192}, {"intermediate_size", 28672},
                 {"num_hidden_layers", 80}, {"num_attention_heads", 64}, {"num_key_value_heads", 8},
                 {"vocab_size", 128256}, {"max_position_embeddings", 8192}, {"rope_theta", 500000.0},
                 {"bos_token_id", 128000}, {"eos_token_id", 128001}, {"torch_dtype", "bfloat16"}});
  if (name == "mistral-7b")
    return with({{"architectures", {"MistralForCausalLM"}}, {"hidden_size", 4096}, {"intermediate_size", 14336},
                 {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                 {"vocab_size", 32000}, {"max_position_embeddings", 32768}, {"rope_theta", 10000.0},
                 {"sliding_window", 4096}, {"torch_dtype", "bfloat16"}});
  if (name == "qwen2-7b")
    return with({{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", 3584}, {"intermediate_size", 18944},
                 {"num_hidden_layers", 28}, {"num_attention_heads", 28}, {"num_key_value_heads", 4},
                 {"vocab_size", 152064}, {"max_position_embeddings", 32768}, {"rope_theta", 1000000.0},
                 {"rms_norm_eps", 1e-6}, {"bos_token_id", 151643}, {"eos_token_id", 151645},
                 {"torch_dtype", "bfloat16"}});
  if (name == "pythia-1.4b")
    return {{"architectures", {"GPTNeoXForCausalLM"}}, {"hidden_size", 2048}, {"intermediate_size", 8192},
            {"num_hidden_layers", 24}, {"num_attention_heads", 16}, {"vocab_size", 50304},
            {"max_position_embeddings", 2048}, {"rotary_pct", 0.25}, {"rotary_emb_base", 10000},
            {"layer_norm_eps", 1e-5}, {"hidden_act", "gelu"}, {"use_parallel_residual", true},
            {"tie_word_embeddings", false}, {"bos_token_id", 0}, {"eos_token_id", 0}, {"torch_dtype", "float16"}};
  throw Error(ErrorCode::kInvalidArgument,
              "unknown preset '" + name + "' (llama2-7b, llama3-8b, llama3-70b, mistral-7b, qwen2-7b, pythia-1.4b, or a config.json path)");
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  enum Init { kRandom, kOnes, kZeros } init;
};

// Every tensor name the loader expects for this config, in the checkpoint's own naming.
std::vector<Spec> tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, in = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim(), V = c.vocab_size;
  std::vector<Spec> s;
  if (c.arch == Arch::kGptNeoX) {
    s.push_back({"gpt_neox.embed_in.weight", {V, h}, Spec::kRandom});
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string p = "gpt_neox.layers." + std::to_string(i) + ".";
      for (const char* n : {"input_layernorm", "post_attention_layernorm"}) {
        s.push_back({p + n + ".weight", {h}, Spec::kOnes});
        s.push_back({p + n + ".bias", {h}, Spec::kZeros});
      }
      s.push_back({p + "attention.query_key_value.weight", {3 * q, h}, Spec::kRandom});
      s.push_back({p + "attention.query_key_value.bias", {3 * q}, Spec::kZeros});
      s.push_back({p + "attention.dense.weight", {h, q}, Spec::kRandom});
      s.push_back({p + "attention.dense.bias", {h}, Spec::kZeros});
      s.push_back({p + "mlp.dense_h_to_4h.weight", {in, h}, Spec::kRandom});
      s.push_back({p + "mlp.dense_h_to_4h.bias", {in}, Spec::kZeros});
      s.push_back({p + "mlp.dense_4h_to_h.weight", {h, in}, Spec::kRandom});
      s.push_back({p + "mlp.dense_4h_to_h.bias", {h}, Spec::kZeros});
    }
    s.push_back({"gpt_neox.final_layer_norm.weight", {h}, Spec::kOnes});
    s.push_back({"gpt_neox.final_layer_norm.bias", {h}, Spec::kZeros});
    s.push_back({"embed_out.weight", {V, h}, Spec::kRandom});
    return s;
  }
  s.push_back({"model.embed_tokens.weight", {V, h}, Spec::kRandom});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {h}, Spec::kOnes});
    s.push_back({p + "self_attn.q_proj.weight", {q, h}, Spec::kRandom});
    s.push_back({p + "self_attn.k_proj.weight", {kv, h}, Spec::kRandom});
    s.push_back({p + "self_attn.v_proj.weight", {kv, h}, Spec::kRandom});
    if (c.qkv_bias) {
      s.push_back({p + "self_attn.q_proj.bias", {q}, Spec::kZeros});
      s.push_back({p + "self_attn.k_proj.bias", {kv}, Spec::kZeros});
      s.push_back({p + "self_attn.v_proj.bias", {kv}, Spec::kZeros});
    }
    s.push_back({p + "self_attn.o_proj.weight", {h, q}, Spec::kRandom});
    s.push_back({p + "post_attention_layernorm.weight", {h}, Spec::kOnes});
    s.push_back({p + "mlp.gate_proj.weight", {in, h}, Spec::kRandom});
    s.push_back({p + "mlp.up_proj.weight", {in, h}, Spec::kRandom});
    s.push_back({p + "mlp.down_proj.weight", {h, in}, Spec::kRandom});
  }
  s.push_back({"model.norm.weight", {h}, Spec::kOnes});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {V, h}, Spec::kRandom});
  return s;
}

// Uniform(-a, a) with standard deviation `std` (transformers' default init: 0.02), from a counter
// hash so that threads fill disjoint ranges reproducibly.
uint16_t random_value(uint64_t seed, uint64_t i, DType t, float std) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  const float u = static_cast<float>(x >> 40) / 16777216.0f;  // [0, 1)
  // a = sqrt(3) std, written so that the default gives the bytes it always gave (a = 0.0346).
  const float v = (2.0f * u - 1.0f) * (0.0346f * (std / 0.02f));
  return t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
}

void write_tensor(std::ofstream& out, const Spec& s, DType t, uint64_t seed, float std) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  const uint16_t one = t == DType::kF16 ? f32_to_f16(1.0f) : f32_to_bf16(1.0f);
  constexpr int64_t kChunk = 1 << 24;
  std::vector<uint16_t> buf(std::min(n, kChunk));
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int64_t base = 0; base < n; base += kChunk) {
    const int64_t m = std::min(kChunk, n - base);
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < threads; ++w)
      pool.emplace_back([&, w] {
        for (int64_t i = m * w / threads; i < m * (w + 1) / threads; ++i)
          buf[i] = s.init == Spec::kRandom ? random_value(seed, base + i, t, std) : s.init == Spec::kOnes ? one : 0;
      });
    for (auto& th : pool) th.join();
    out.write(reinterpret_cast<const char*>(buf.data()), m * 2);
  }
}

// Letter strings of length 2, then 3, then 4 ("aa", "ab", ..., "aaa", ...): the names of the
// vocabulary entries past the byte symbols, in order.
std::vector<std::string> letter_strings(size_t count) {
  std::vector<std::string> out;
  for (int len = 2; out.size() < count; ++len) {
    std::string w(static_cast<size_t>(len), 'a');
    while (out.size() < count) {
      out.push_back(w);
      int i = len - 1;  // the next string of this length, the last letter fastest
      while (i >= 0 && w[i] == 'z') w[i--] = 'a';
      if (i < 0) break;
      ++w[i];
    }
  }
  return out;
}

// A byte-level BPE tokenizer.json with the config's vocabulary size: two specials, the 256 byte
// symbols, then lowercase letter strings of 2..4 letters, each with the merge of its prefix and
// its last letter. Random models have no meaningful text, but what they generate must survive a
// round trip through text about as long as it was: a chat that re-sends its history (rill-loadtest
// --turns) re-tokenizes the answers, which opaque filler names would multiply by their length.
json synthetic_tokenizer(int vocab, int bos, int eos) {
  json v = json::object();
  std::vector<std::string> byte_syms;
  for (int b = 0; b < 256; ++b) {  // GPT-2 bytes_to_unicode
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    static int extra = 0;
    const int cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    byte_syms.push_back(s);
  }
  json added = json::array();
  std::vector<std::string> names(vocab);
  names[bos] = bos == eos ? "<|endoftext|>" : "<s>";
  if (eos != bos) names[eos] = "</s>";
  int next_byte = 0;
  const int specials = bos == eos ? 1 : 2;
  const std::vector<std::string> letters =
      letter_strings(static_cast<size_t>(std::max(0, vocab - 256 - specials)));
  size_t next_letters = 0;
  json merges = json::array();
  for (int i = 0; i < vocab; ++i) {
    if (i == bos || i == eos) continue;
    if (next_byte < 256) {
      names[i] = byte_syms[next_byte++];
    } else {
      names[i] = letters[next_letters++];
      merges.push_back(names[i].substr(0, names[i].size() - 1) + " " + names[i].back());
    }
  }
  for (int id = 0; id < vocab; ++id) v[names[id]] = id;
  for (int s : bos == eos ? std::vector<int>{bos} : std::vector<int>{bos, eos})
    added.push_back({{"id", s}, {"content", names[s]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                     {"ignore_merges", false}, {"vocab", v}, {"merges", merges}}}};
}

// The projections whose outputs are added to the residual stream (Llama-style and GPT-NeoX names).
bool writes_residual(const std::string& name) {
  for (const char* end : {".o_proj.weight", ".down_proj.weight", ".attention.dense.weight",
                          ".mlp.dense_4h_to_h.weight"})
    if (name.size() > std::strlen(end) && name.compare(name.size() - std::strlen(end),
                                                       std::string::npos, end) == 0)
      return true;
  return false;
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  if (!out) throw Error(ErrorCode::kInvalidArgument, p.string() + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  cli::Args args("rill-make-model", "Write a random-initialised checkpoint in Hugging Face format.");
  args.option("config", "llama2-7b", "preset (llama2-7b, llama3-8b, llama3-70b, mistral-7b, qwen2-7b, pythia-1.4b) or config.json");
  args.option("out", "", "output directory");
  args.option("dtype", "", "float16 | bfloat16 (default: the config's torch_dtype)");
  args.option("seed", "0", "random seed");
  args.option("init-std", "0.02",
              "standard deviation of the random weights (0.02: transformers' default; a smaller "
              "model keeps a larger one's per-layer gains with 0.02 * sqrt(4096 / hidden_size))");
  args.flag("scaled-residual-init",
            "the projections that write into the residual stream (attention's output, the MLP's "
            "down) get --init-std / sqrt(2 x layers), as GPT-2 and Megatron-LM initialise them: "
            "each layer then adds a small update to the stream, as in trained checkpoints, "
            "instead of one as large as the stream");
  args.parse(argc, argv);
  try {
    if (args.get("out").empty()) args.fail("--out is required");
    json cfg;
    const std::string c = args.get("config");
    if (fs::exists(c)) {
      std::ifstream in(c);
      cfg = json::parse(in);
    } else {
      cfg = preset(c);
    }
    if (!args.get("dtype").empty()) cfg["torch_dtype"] = args.get("dtype");
    const ModelConfig mc = parse_hf_config(cfg, c);  // validates
    const double init_std = args.get_double("init-std");
    if (!(init_std > 0 && init_std <= 1)) args.fail("--init-std must be in (0, 1]");
    const DType t = mc.stored_dtype == DType::kF32 ? DType::kF16 : mc.stored_dtype;
    cfg["torch_dtype"] = dtype_name(t);
    const fs::path out = args.get("out");
    fs::create_directories(out);
    const auto specs = tensor_specs(mc);
    json header = json::object();
    uint64_t offset = 0;
    for (const Spec& s : specs) {
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      header[s.name] = {{"dtype", t == DType::kF16 ? "F16" : "BF16"}, {"shape", s.shape},
                        {"data_offsets", {offset, offset + uint64_t(n) * 2}}};
      offset += uint64_t(n) * 2;
    }
    header["__metadata__"] = {{"format", "pt"}, {"generator", "rill-make-model"}};
    std::string h = header.dump();
    h.resize((h.size() + 7) / 8 * 8, ' ');  // 8-byte aligned data, as the safetensors writer does
    std::ofstream st(out / "model.safetensors", std::ios::binary);
    const uint64_t hlen = h.size();
    st.write(reinterpret_cast<const char*>(&hlen), 8);
    st.write(h.data(), static_cast<std::streamsize>(h.size()));
    const uint64_t seed = static_cast<uint64_t>(args.get_int64("seed")) * 0x100000001B3ull + 1;
    const double residual_std =
        args.on("scaled-residual-init") ? init_std / std::sqrt(2.0 * mc.num_layers) : init_std;
    for (size_t i = 0; i < specs.size(); ++i)
      write_tensor(st, specs[i], t, seed + i * 0x51ED27ull,
                   float(writes_residual(specs[i].name) ? residual_std : init_std));
    st.close();
    if (!st) throw Error(ErrorCode::kInvalidArgument, (out / "model.safetensors").string() + ": write failed");
    write_json(out / "config.json", cfg);
    const int bos = mc.bos_token_id.value_or(0), eos = mc.eos_token_ids.empty() ? bos : mc.eos_token_ids[0];
    write_json(out / "generation_config.json", {{"bos_token_id", bos}, {"eos_token_id", eos}, {"do_sample", false}});
    write_json(out / "tokenizer.json", synthetic_tokenizer(mc.vocab_size, bos, eos));
    const std::string bos_s = bos == eos ? "<|endoftext|>" : "<s>", eos_s = bos == eos ? bos_s : "</s>";
    write_json(out / "tokenizer_config.json", {{"bos_token", bos_s}, {"eos_token", eos_s},
                                               {"tokenizer_class", "PreTrainedTokenizerFast"}});
    std::printf("wrote %s: %s, %.2f B parameters, %.1f GB\n", out.c_str(), mc.architecture.c_str(), offset / 2 / 1e9,
                offset / 1e9);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-make-model: error: %s\n", e.what());
    return 1;
  } catch (const json::exception& e) {
    std::fprintf(stderr, "rill-make-model: bad config: %s\n", e.what());
    return 1;
  }
}
