// Reads safetensors checkpoints (single file or sharded with model.safetensors.index.json)
// through mmap. Every malformed input is reported as rill::Error naming the file and the problem.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "engine/model/tensor.h"

namespace rill {

class SafetensorsFile {
 public:
  /// Maps `path` and validates its header: size, JSON, dtypes, shapes and data offsets.
  static SafetensorsFile open(const std::filesystem::path& path);
  /// The same for a whole file already in memory (what open() maps): the tensors point into
  /// `file` and share `owner`, which keeps it alive; `path` names it in errors.
  static SafetensorsFile parse(std::span<const std::byte> file, std::shared_ptr<const void> owner,
                               const std::filesystem::path& path);
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// All tensors of a model directory: model.safetensors, or the shards listed by
/// model.safetensors.index.json. Throws kNotFound when neither exists.
std::map<std::string, Tensor> load_safetensors_dir(const std::filesystem::path& dir);

}  // namespace rill
