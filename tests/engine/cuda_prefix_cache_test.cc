// Prefix caching on the CUDA runner (the checks: tests/engine/prefix_runner_checks.h; the CPU
// runner passes the same ones in cpu_prefix_runner_test.cc).
// GPU tests: they skip visibly where no GPU exists and run on the GPU machine before changes land.
#include <gtest/gtest.h>

#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "engine/serving/serving_engine.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"
#include "tests/engine/prefix_runner_checks.h"

namespace rill {
namespace {

#ifdef RILL_HAVE_CUDA

using testing::source_path;

testing::MakeRunner cuda_runners(const Model& m) {
  return
      [&m](bool graphs) -> std::unique_ptr<ModelRunner> { return testing::cuda_runner(m, graphs); };
}

TEST(CudaPrefixCache, StartingFromCachedBlocksEqualsComputingThem) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_cached_blocks_equal_computing(cuda_runners(m));
}

TEST(CudaPrefixCache, PipelinedSamplesNameTheirBlocks) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_pipelined_samples_name_their_blocks(cuda_runners(m));
}

TEST(CudaPrefixCache, ServingOutputsEqualTheCacheOff) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  testing::check_serving_outputs_equal_the_cache_off(m, cuda_runners(m), /*exact=*/false);
}

#else

TEST(CudaPrefixCache, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA: CUDA prefix-cache tests skipped";
}

#endif

}  // namespace
}  // namespace rill
