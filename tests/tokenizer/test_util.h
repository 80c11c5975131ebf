// Helpers shared by the tokenizer tests: small hand-built tokenizer.json documents, so the unit
// tests need no fixture files.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/utf8.h"

namespace rill::test {

/// A tokenizer.json with the given model, other components null unless set by the caller.
inline nlohmann::json bpe_json(nlohmann::json vocab, nlohmann::json merges) {
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = nullptr;
  j["decoder"] = nullptr;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return j;
}

inline Tokenizer load(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  return Tokenizer::from_hf_json(j.dump(), config.is_null() ? "" : config.dump(), "test.json");
}

/// GPT-2 style byte-level BPE: the 256 byte characters (ids 0..255), then `merges` (each merge
/// "a b" adds the token a+b), plus <|endoftext|> as a special added token.
inline nlohmann::json byte_level_json(const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_to_chars(static_cast<uint8_t>(b))] = b;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    const std::string merged = m.substr(0, space) + m.substr(space + 1);
    if (!vocab.contains(merged)) vocab[merged] = static_cast<int>(vocab.size());
    merge_list.push_back(m);
  }
  const int eot = static_cast<int>(vocab.size());
  vocab["<|endoftext|>"] = eot;
  nlohmann::json j = bpe_json(vocab, merge_list);
  j["added_tokens"] = {{{"id", eot},
                        {"content", "<|endoftext|>"},
                        {"special", true},
                        {"normalized", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"single_word", false}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  return j;
}

/// Llama-2 style SentencePiece BPE: <unk> <s> </s>, <0x00>..<0xFF>, then `pieces` in order
/// and `merges`; Prepend/Replace normalizer, ByteFallback decoder chain, "<s> $A" template.
inline nlohmann::json sentencepiece_json(const std::vector<std::string>& pieces,
                                         const std::vector<std::string>& merges) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  for (const std::string& p : pieces) vocab[p] = static_cast<int>(vocab.size());
  nlohmann::json j = bpe_json(vocab, merges);
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  j["model"]["byte_fallback"] = true;
  nlohmann::json added = nlohmann::json::array();
  for (int id = 0; id < 3; ++id) {
    const char* names[] = {"<unk>", "<s>", "</s>"};
    added.push_back({{"id", id},
                     {"content", names[id]},
                     {"special", true},
                     {"normalized", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false}});
  }
  j["added_tokens"] = added;
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", nlohmann::json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  return j;
}

/// Writes bytes to a fresh file under the test temp dir and returns its path.
inline std::filesystem::path write_temp(const std::string& name, const std::string& bytes) {
  const auto dir = std::filesystem::temp_directory_path() / "rill_tokenizer_tests";
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace rill::test
