#include "engine/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/mapped_file.h"

namespace rill {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, path.string() + ": " + what);
}

DType safetensors_dtype(const std::filesystem::path& path, const std::string& name,
                        const std::string& code) {
  if (code == "F32") return DType::kF32;
  if (code == "F16") return DType::kF16;
  if (code == "BF16") return DType::kBF16;
  if (code == "F8_E4M3") return DType::kF8E4M3;  // fp8 weights; their scales are checked at load
  throw Error(ErrorCode::kUnsupported, path.string() + ": tensor '" + name + "' has dtype " + code +
                                           " (supported: F32, F16, BF16, F8_E4M3)");
}

Tensor parse_entry(const std::filesystem::path& path, const std::string& name, const json& info,
                   const std::byte* data_start, size_t data_size) {
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
      !info.contains("data_offsets"))
    fail(path, "tensor '" + name + "' lacks dtype, shape or data_offsets");
  Tensor t;
  t.name = name;
  t.dtype = safetensors_dtype(path, name, info["dtype"].get<std::string>());
  for (const auto& d : info["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(path, "tensor '" + name + "' has a bad shape");
    t.shape.push_back(d.get<int64_t>());
  }
  // The element count within the data's size, checked as it is multiplied: a shape such as
  // [2^32, 2^32] must be refused before anything computes its (overflowing) size.
  if (std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end()) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      if (elements > data_size / static_cast<uint64_t>(d))
        fail(path, "tensor '" + name + "' has shape " + t.shape_str() +
                       ", more elements than the file's " + std::to_string(data_size) +
                       " data bytes hold");
      elements *= static_cast<uint64_t>(d);
    }
  }
  const auto& off = info["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(path, "tensor '" + name + "' has bad data_offsets");
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end || end > data_size)
    fail(path, "tensor '" + name + "' data [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") lies outside the file's " + std::to_string(data_size) +
                   " data bytes (truncated file?)");
  if (end - begin != t.nbytes())
    fail(path, "tensor '" + name + "' has " + std::to_string(end - begin) + " bytes but shape " +
                   t.shape_str() + " of " + dtype_name(t.dtype) + " needs " + std::to_string(t.nbytes()));
  t.data = data_start + begin;
  return t;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto file = map_file(path);
  return parse({file->data, file->size}, std::shared_ptr<const void>(file, file->data), path);
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> file,
                                       std::shared_ptr<const void> owner,
                                       const std::filesystem::path& path) {
  if (file.size() < 8)
    fail(path, "too small to be a safetensors file (" + std::to_string(file.size()) + " bytes)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);  // little-endian on every platform we build for
  if (header_len > file.size() - 8)
    fail(path, "header length " + std::to_string(header_len) + " exceeds the file size " +
                   std::to_string(file.size()) + " (truncated or not safetensors)");
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file.data()) + 8,
                         reinterpret_cast<const char*>(file.data()) + 8 + header_len);
  } catch (const json::exception& e) {
    fail(path, std::string("malformed header JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  SafetensorsFile out;
  const std::byte* data_start = file.data() + 8 + header_len;
  const size_t data_size = file.size() - 8 - header_len;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (const auto& [k, v] : info.items())
          if (v.is_string()) out.metadata_[k] = v.get<std::string>();
      continue;
    }
    try {
      Tensor t = parse_entry(path, name, info, data_start, data_size);
      t.owner = owner;
      out.tensors_.emplace(name, std::move(t));
    } catch (const json::exception& e) {
      fail(path, "tensor '" + name + "': " + e.what());
    }
  }
  return out;
}

std::map<std::string, Tensor> load_safetensors_dir(const std::filesystem::path& dir) {
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) return SafetensorsFile::open(single).tensors();
  if (!std::filesystem::exists(index))
    throw Error(ErrorCode::kNotFound, dir.string() + ": no model.safetensors or model.safetensors.index.json");
  json idx;
  try {
    std::ifstream in(index);
    idx = json::parse(in);
  } catch (const json::exception& e) {
    fail(index, std::string("malformed JSON: ") + e.what());
  }
  if (!idx.contains("weight_map") || !idx["weight_map"].is_object()) fail(index, "no weight_map object");
  std::map<std::string, std::string> wanted;  // tensor -> shard
  for (const auto& [name, shard] : idx["weight_map"].items()) {
    if (!shard.is_string()) fail(index, "weight_map entry '" + name + "' is not a file name");
    wanted[name] = shard.get<std::string>();
  }
  std::map<std::string, SafetensorsFile> shards;
  std::map<std::string, Tensor> out;
  for (const auto& [name, shard] : wanted) {
    if (shard.find('/') != std::string::npos) fail(index, "shard name '" + shard + "' must be a file name");
    auto it = shards.find(shard);
    if (it == shards.end()) it = shards.emplace(shard, SafetensorsFile::open(dir / shard)).first;
    auto t = it->second.tensors().find(name);
    if (t == it->second.tensors().end()) fail(dir / shard, "tensor '" + name + "' listed in the index is missing");
    out.emplace(name, t->second);
  }
  return out;
}

}  // namespace rill
