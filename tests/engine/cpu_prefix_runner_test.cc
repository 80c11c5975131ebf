// Prefix caching on the CPU runner: the checks the CUDA runner must also pass
// (tests/engine/prefix_runner_checks.h, cuda_prefix_cache_test.cc).
#include <gtest/gtest.h>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/model.h"
#include "tests/engine/golden.h"
#include "tests/engine/prefix_runner_checks.h"

namespace rill {
namespace {

using testing::source_path;

testing::MakeRunner cpu_runners(const Model& m) {
  return [&m](bool) -> std::unique_ptr<ModelRunner> {
    return std::make_unique<CpuRunner>(m, CpuRunnerOptions{.num_threads = 2});
  };
}

TEST(CpuPrefixCache, StartingFromCachedBlocksEqualsComputingThem) {
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_cached_blocks_equal_computing(cpu_runners(m));
}

TEST(CpuPrefixCache, PipelinedSamplesNameTheirBlocks) {
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_pipelined_samples_name_their_blocks(cpu_runners(m));
}

TEST(CpuPrefixCache, ServingOutputsEqualTheCacheOff) {
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_serving_outputs_equal_the_cache_off(m, cpu_runners(m), /*exact=*/true);
}

}  // namespace
}  // namespace rill
