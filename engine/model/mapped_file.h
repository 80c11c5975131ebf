// A read-only memory mapping of a whole file, unmapped when the last reference goes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace rill {

struct MappedFile {
  const std::byte* data = nullptr;
  size_t size = 0;
  ~MappedFile();
};

/// Maps `path` read-only. Throws rill::Error (kNotFound / kInvalidArgument) naming the file.
std::shared_ptr<const MappedFile> map_file(const std::filesystem::path& path);

}  // namespace rill
