// The critical-path attribution of rill-bench --trace, on hand-made timelines.
#include <gtest/gtest.h>

#include "bench/kernel_trace.h"

namespace rill::bench {
namespace {

const StepAttribution::Row* find(const StepAttribution& a, const std::string& label) {
  for (const auto& r : a.rows)
    if (r.label == label) return &r;
  return nullptr;
}

TEST(KernelTrace, OverlappingKernelsAreChargedWhatTheyAddToTheEnd) {
  // One step: a runs 0..10; b is resident from 2 (PDL) and ends at 15; c starts after a gap at
  // 20 and ends at 24. Critical path: a 10, b 5, gap 5, c 4 = span 24.
  const std::vector<KernelRecord> recs = {
      {"a", 0, 10, 7, 4}, {"b", 2, 15, 7, 8}, {"c", 20, 24, 7, 8}};
  const StepAttribution s = attribute_steps(recs);
  EXPECT_EQ(s.steps, 1);
  EXPECT_NEAR(s.span_ms, 24e-6, 1e-12);
  ASSERT_NE(find(s, "a [4] after start"), nullptr);
  EXPECT_NEAR(find(s, "a [4] after start")->marginal_ms, 10e-6, 1e-12);
  EXPECT_NEAR(find(s, "b [8] after a")->marginal_ms, 5e-6, 1e-12);
  EXPECT_NEAR(find(s, "b [8] after a")->resident_us, 13e-3, 1e-12);
  EXPECT_NEAR(find(s, "c [8] after b")->marginal_ms, 4e-6, 1e-12);
  EXPECT_NEAR(find(s, "(no kernel resident)")->marginal_ms, 5e-6, 1e-12);
  double sum = 0;
  for (const auto& r : s.rows) sum += r.marginal_ms;
  EXPECT_NEAR(sum, s.span_ms, 1e-12);
  EXPECT_EQ(s.rows.front().label, "a [4] after start");  // largest first
}

TEST(KernelTrace, KernelHiddenInsideAnotherCostsNothing) {
  // b starts and ends inside a: it adds nothing to the step's end.
  const StepAttribution s = attribute_steps({{"a", 0, 10, 1, 1}, {"b", 2, 6, 1, 1}});
  EXPECT_NEAR(find(s, "b [1] after a")->marginal_ms, 0.0, 1e-12);
  EXPECT_NEAR(find(s, "a [1] after start")->marginal_ms, 10e-6, 1e-12);
}

TEST(KernelTrace, StepsAreGroupedByLaunchAndAveraged) {
  // Two replays (launch ids 1 and 2) of the same two kernels, the second one slower.
  const std::vector<KernelRecord> recs = {
      {"g", 100, 110, 1, 2}, {"h", 105, 120, 1, 2}, {"g", 200, 214, 2, 2}, {"h", 210, 230, 2, 2}};
  const StepAttribution s = attribute_steps(recs);
  EXPECT_EQ(s.steps, 2);
  EXPECT_DOUBLE_EQ(find(s, "g [2] after start")->launches, 1.0);
  EXPECT_NEAR(find(s, "g [2] after start")->marginal_ms, (10e-6 + 14e-6) / 2, 1e-12);
  EXPECT_NEAR(find(s, "h [2] after g")->marginal_ms, (10e-6 + 16e-6) / 2, 1e-12);
  EXPECT_EQ(find(s, "(no kernel resident)"), nullptr);
}

TEST(KernelTrace, EmptyTraceHasNoSteps) {
  const StepAttribution s = attribute_steps({});
  EXPECT_EQ(s.steps, 0);
  EXPECT_TRUE(s.rows.empty());
}

}  // namespace
}  // namespace rill::bench
