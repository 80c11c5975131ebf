#include <atomic>
#include <string>

#include "dispatch.cuh"

namespace rill::kernels {

namespace {
thread_local std::string g_last_detail;
std::atomic<bool> g_programmatic_launch{true};
}  // namespace

cudaError_t invalid_argument(const std::string& why) {
  g_last_detail = why;
  return cudaErrorInvalidValue;
}

const char* last_kernel_error_detail() { return g_last_detail.c_str(); }

void set_programmatic_launch(bool enabled) {
  g_programmatic_launch.store(enabled);
}

bool programmatic_launch() {
  return g_programmatic_launch.load();
}

}  // namespace rill::kernels
