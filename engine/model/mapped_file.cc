#include "engine/model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace rill {

MappedFile::~MappedFile() {
  if (data && size) munmap(const_cast<std::byte*>(data), size);
}

std::shared_ptr<const MappedFile> map_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                path.string() + ": cannot open: " + std::strerror(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument, path.string() + ": not a regular file");
  }
  auto file = std::make_shared<MappedFile>();
  file->size = static_cast<size_t>(st.st_size);
  if (file->size > 0) {
    void* p = mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorCode::kInvalidArgument, path.string() + ": mmap failed: " + std::strerror(err));
    }
    file->data = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return file;
}

}  // namespace rill
