#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "dispatch.cuh"

namespace rill::kernels {

namespace {
thread_local std::string g_last_detail;
std::atomic<bool> g_programmatic_launch{true};
std::atomic<int> g_smem_carveout{-1};
}  // namespace

cudaError_t invalid_argument(const std::string& why) {
  g_last_detail = why;
  return cudaErrorInvalidValue;
}

const char* last_kernel_error_detail() {
  return g_last_detail.c_str();
}

void set_programmatic_launch(bool enabled) {
  g_programmatic_launch.store(enabled);
}

bool programmatic_launch() {
  return g_programmatic_launch.load();
}

void set_smem_carveout(int percent) {
  g_smem_carveout.store(percent < 0 ? -1 : std::min(percent, 100));
}

int smem_carveout() {
  return g_smem_carveout.load();
}

// Function attributes belong to the device current when they are set: with several GPUs in one
// process (tensor parallelism, a thread per GPU) each device needs its own, so "done" is per
// device.
cudaError_t apply_smem_carveout(const void* kernel) {
  const int percent = g_smem_carveout.load();
  if (percent < 0) return cudaSuccess;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::set<std::tuple<int, const void*, int>> done;  // (device, kernel, percent) applied
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count({device, kernel, percent})) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
  if (err == cudaSuccess) done.insert({device, kernel, percent});
  return err;
}

cudaError_t allow_dynamic_smem(const void* kernel, int bytes) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::set<std::tuple<int, const void*, int>> done;  // (device, kernel, bytes) allowed
  std::lock_guard<std::mutex> lock(mutex);
  if (done.count({device, kernel, bytes})) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.insert({device, kernel, bytes});
  return err;
}

}  // namespace rill::kernels
