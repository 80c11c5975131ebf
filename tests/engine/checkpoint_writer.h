// Writes small Hugging Face checkpoints for loader tests: a temporary directory, safetensors
// files from raw tensors, and copies of fixtures with tensors or config fields changed.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/model/safetensors.h"

namespace rill::testing {

/// A directory under the system temp dir, unique per test, removed when it goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "ckpt") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("rill_" + tag + "_" + std::string(info->test_suite_name()) + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// One tensor as a safetensors file stores it.
struct RawTensor {
  std::string dtype;  // "F32", "BF16", "F8_E4M3", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline RawTensor raw_f32(std::vector<int64_t> shape, const std::vector<float>& v) {
  return {"F32", std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))};
}

inline void write_safetensors(const std::filesystem::path& file,
                              const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string h = header.dump();
  const uint64_t n = h.size();
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << data;
}

/// The tensors of a safetensors file as raw bytes (to be changed and written back).
inline std::map<std::string, RawTensor> read_raw(const std::filesystem::path& file) {
  std::map<std::string, RawTensor> out;
  const SafetensorsFile f = SafetensorsFile::open(file);
  for (const auto& [name, t] : f.tensors()) {
    static const std::map<DType, std::string> codes = {{DType::kF32, "F32"},
                                                       {DType::kF16, "F16"},
                                                       {DType::kBF16, "BF16"},
                                                       {DType::kF8E4M3, "F8_E4M3"}};
    out[name] = {codes.at(t.dtype), t.shape,
                 std::string(static_cast<const char*>(t.data), t.nbytes())};
  }
  return out;
}

/// Copies checkpoint directory `from` into `to` (files only), then lets `edit` change its config
/// and tensors before writing them back.
inline void copy_checkpoint(
    const std::filesystem::path& from, const std::filesystem::path& to,
    const std::function<void(nlohmann::json& config, std::map<std::string, RawTensor>& tensors)>&
        edit) {
  for (const auto& e : std::filesystem::directory_iterator(from))
    if (e.is_regular_file())
      std::filesystem::copy_file(e.path(), to / e.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(to / "config.json"));
  auto tensors = read_raw(to / "model.safetensors");
  edit(config, tensors);
  std::ofstream(to / "config.json") << config.dump(2);
  write_safetensors(to / "model.safetensors", tensors);
}

/// The message of the rill::Error `f` throws ("<no error>" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace rill::testing
