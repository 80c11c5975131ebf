#include "engine/serving/ids.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "engine/error.h"

namespace rill {

namespace {

// getrandom(2) rather than std::random_device: it is the kernel's CSPRNG on every libstdc++
// version (random_device's "default" source is RDRAND on some builds, /dev/urandom on others),
// and it needs no file descriptor, so ids are still made when the process is out of them.
void fill_random(uint8_t* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = getrandom(out + done, n - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(
          ErrorCode::kInternal,
          std::string("getrandom failed: no random bytes for an id: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(got);
  }
}

}  // namespace

std::string random_id(std::string_view prefix) {
  std::array<uint8_t, 16> bytes{};
  fill_random(bytes.data(), bytes.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id.reserve(prefix.size() + 2 * bytes.size());
  for (uint8_t b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

void check_id_length(std::string_view id, std::string_view what) {
  if (id.size() <= kMaxIdBytes) return;
  throw Error(ErrorCode::kInvalidArgument, std::string(what) + " is " + std::to_string(id.size()) +
                                               " bytes, over the limit of " +
                                               std::to_string(kMaxIdBytes));
}

}  // namespace rill
