#include "engine/tp/tp_factory.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/tp/tp_shard.h"

namespace rill::tp {

std::unique_ptr<TpRunner> make_cpu_tp_runner(const Model& model, int world,
                                             const CpuRunnerOptions& options) {
  if (const auto why = tp_unsupported_reason(model.config, world))
    throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size: " + *why);
  auto host = std::make_shared<HostCollective>(world);
  return std::make_unique<TpRunner>(world, model.config, host, [&, host](int rank) {
    CpuRunnerOptions o = options;
    o.tp_comm = host;
    o.tp_rank = rank;
    return std::make_unique<CpuRunner>(shard_model(model, world, rank), o);
  });
}

std::vector<int> parse_gpus(const std::string& list) {
  std::vector<int> out;
  if (list.empty()) return out;
  size_t at = 0;
  for (;;) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    if (item.empty() || item.size() > 3 ||
        item.find_first_not_of("0123456789") != std::string::npos)
      throw Error(ErrorCode::kInvalidArgument,
                  "--gpus: '" + list + "' is not a list of device ids such as 0,1");
    out.push_back(std::stoi(item));
    if (out.size() > size_t(kMaxWorld))
      throw Error(ErrorCode::kInvalidArgument,
                  "--gpus: more than " + std::to_string(kMaxWorld) + " devices");
    if (comma == list.size()) return out;
    at = comma + 1;
  }
}

std::vector<int> choose_gpus(const std::vector<int>& gpus, int world, int visible) {
  if (gpus.empty()) {
    if (world > visible)
      throw Error(ErrorCode::kInvalidArgument, "--tensor-parallel-size " + std::to_string(world) +
                                                   " needs " + std::to_string(world) + " GPUs, " +
                                                   std::to_string(visible) + " visible");
    std::vector<int> all(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)] = r;
    return all;
  }
  if (static_cast<int>(gpus.size()) != world)
    throw Error(ErrorCode::kInvalidArgument, "--gpus lists " + std::to_string(gpus.size()) +
                                                 " devices, --tensor-parallel-size is " +
                                                 std::to_string(world));
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i] < 0 || gpus[i] >= visible)
      throw Error(ErrorCode::kInvalidArgument, "--gpus: device " + std::to_string(gpus[i]) +
                                                   " is not visible (" + std::to_string(visible) +
                                                   " visible: 0 .. " + std::to_string(visible - 1) +
                                                   ")");
    if (std::count(gpus.begin(), gpus.end(), gpus[i]) > 1)
      throw Error(ErrorCode::kInvalidArgument,
                  "--gpus: device " + std::to_string(gpus[i]) + " is listed twice");
  }
  return gpus;
}

#ifndef RILL_HAVE_CUDA
std::unique_ptr<TpRunner> make_cuda_tp_runner(const Model&, const EngineOptions&) {
  throw Error(ErrorCode::kUnsupported,
              "this build of Rill has no CUDA support (rebuild with nvcc present)");
}
#endif

}  // namespace rill::tp
