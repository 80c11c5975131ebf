#include <string>

#include "dispatch.cuh"

namespace rill::kernels {

namespace {
thread_local std::string g_last_detail;
}

cudaError_t invalid_argument(const std::string& why) {
  g_last_detail = why;
  return cudaErrorInvalidValue;
}

const char* last_kernel_error_detail() { return g_last_detail.c_str(); }

}  // namespace rill::kernels
