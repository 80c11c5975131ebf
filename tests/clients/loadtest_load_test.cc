// rill-loadtest's load-shaping pieces: arrival schedules (mean and variance of the gaps, the
// ramp's expected counts), length distributions and their spec syntax, statistics with SLOs, and
// synthetic workloads (prompts that share no prefix by chance; shared-prefix groups).
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "clients/rill_loadtest/arrivals.h"
#include "clients/rill_loadtest/length_dist.h"
#include "clients/rill_loadtest/stats.h"
#include "clients/rill_loadtest/workload.h"

namespace rill::loadtest {
namespace {

struct GapStats {
  double mean = 0, variance = 0;
};

GapStats gap_stats(ArrivalSchedule& s, int n) {
  std::vector<double> gaps;
  double prev = 0;
  for (int i = 0; i < n; ++i) {
    const double t = s.next();
    gaps.push_back(t - prev);
    prev = t;
  }
  GapStats g;
  g.mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / n;
  for (double x : gaps) g.variance += (x - g.mean) * (x - g.mean);
  g.variance /= n - 1;
  return g;
}

TEST(Arrivals, PoissonGapsHaveMeanAndVarianceOfTheExponential) {
  ArrivalSchedule s({.rate = 4, .burstiness = 1}, 7);
  const GapStats g = gap_stats(s, 200000);
  EXPECT_NEAR(g.mean, 0.25, 0.25 * 0.01);
  EXPECT_NEAR(g.variance, 0.0625, 0.0625 * 0.03);
}

TEST(Arrivals, GammaBurstinessKeepsTheMeanAndScalesTheVariance) {
  // vLLM: shape = burstiness, scale = 1 / (rate * burstiness): mean 1/rate, var 1/(rate^2 b).
  for (double b : {0.25, 0.5, 3.0}) {
    ArrivalSchedule s({.rate = 10, .burstiness = b}, 11);
    const GapStats g = gap_stats(s, 200000);
    EXPECT_NEAR(g.mean, 0.1, 0.1 * 0.02) << b;
    const double var = 0.01 / b;
    EXPECT_NEAR(g.variance, var, var * 0.05) << b;
  }
}

TEST(Arrivals, ConstantGapsAreExact) {
  ArrivalSchedule s({.rate = 8, .constant = true}, 1);
  for (int i = 1; i <= 100; ++i) EXPECT_NEAR(s.next(), i / 8.0, 1e-9);
}

TEST(Arrivals, InfiniteRateSendsEverythingAtOnce) {
  ArrivalSchedule s({.rate = std::numeric_limits<double>::infinity()}, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.next(), 0.0);
}

TEST(Arrivals, LinearRampFollowsTheCumulativeRate) {
  // L(t) = rate t^2 / (2 ramp) during the ramp: constant arrivals at operational times 1, 2, ...
  // land where L(t) = k; after the ramp the gaps are 1 / rate.
  ArrivalSchedule s({.rate = 10, .constant = true, .ramp_up_s = 4}, 1);
  for (int k = 1; k <= 20; ++k) EXPECT_NEAR(s.next(), std::sqrt(2.0 * 4 * k / 10), 1e-9) << k;
  EXPECT_NEAR(s.real_time(20), 4.0, 1e-9);  // L(4) = 20
  EXPECT_NEAR(s.real_time(25), 4.5, 1e-9);
  // Poisson during the ramp: the mean count up to t = 2 is L(2) = 5 arrivals.
  double count = 0;
  const int runs = 4000;
  for (int r = 0; r < runs; ++r) {
    ArrivalSchedule p({.rate = 10, .ramp_up_s = 4}, static_cast<unsigned long long>(r));
    while (p.next() < 2) count += 1;
  }
  EXPECT_NEAR(count / runs, 5.0, 0.15);
}

TEST(Arrivals, RejectsNonPositiveRateAndBurstiness) {
  EXPECT_THROW(ArrivalSchedule({.rate = 0}, 1), std::invalid_argument);
  EXPECT_THROW(ArrivalSchedule({.rate = 1, .burstiness = 0}, 1), std::invalid_argument);
}

TEST(LengthDist, ParsesTheSpecs) {
  EXPECT_EQ(parse_length_dist(100, "fixed").kind, LengthDist::Kind::kFixed);
  const LengthDist u = parse_length_dist(100, "uniform:0.5");
  EXPECT_EQ(u.kind, LengthDist::Kind::kUniform);
  EXPECT_DOUBLE_EQ(u.ratio, 0.5);
  EXPECT_EQ(parse_length_dist(100, "normal:0.2").kind, LengthDist::Kind::kNormal);
  for (const char* bad : {"", "uniform", "uniform:", "uniform:1.5", "uniform:-0.1", "normal:x",
                          "normal:0.2x", "zipf:1", "fixed:1"})
    EXPECT_THROW(parse_length_dist(100, bad), std::invalid_argument) << bad;
  EXPECT_THROW(parse_length_dist(0, "fixed"), std::invalid_argument);
}

TEST(LengthDist, SamplesStayInRangeWithTheRightMean) {
  std::mt19937_64 rng(3);
  const LengthDist fixed = parse_length_dist(77, "fixed");
  for (int i = 0; i < 100; ++i) EXPECT_EQ(fixed.sample(rng), 77);

  const LengthDist u = parse_length_dist(200, "uniform:0.25");
  double sum = 0;
  int lo = 1 << 30, hi = 0;
  for (int i = 0; i < 100000; ++i) {
    const int x = u.sample(rng);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  EXPECT_EQ(lo, 150);
  EXPECT_EQ(hi, 250);
  EXPECT_NEAR(sum / 100000, 200, 0.5);

  const LengthDist n = parse_length_dist(50, "normal:0.1");
  double nsum = 0, nsq = 0;
  for (int i = 0; i < 100000; ++i) {
    const int x = n.sample(rng);
    ASSERT_GE(x, 1);
    ASSERT_LE(x, 100);
    nsum += x;
    nsq += static_cast<double>(x) * x;
  }
  const double mean = nsum / 100000;
  EXPECT_NEAR(mean, 50, 0.1);
  EXPECT_NEAR(std::sqrt(nsq / 100000 - mean * mean), 5, 0.1);  // rounding adds ~1/12 variance
  // A wide normal is clamped to [1, 2 * mean].
  const LengthDist wide = parse_length_dist(4, "normal:3");
  for (int i = 0; i < 10000; ++i) {
    const int x = wide.sample(rng);
    ASSERT_GE(x, 1);
    ASSERT_LE(x, 8);
  }
}

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4, 10};  // sorted
  // numpy.percentile(v, [50, 90, 99, 0, 100]) = 3, 7.6, 9.76, 1, 10
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3);
  EXPECT_NEAR(percentile(v, 90), 7.6, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 9.76, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({5}, 99), 5);
}

TEST(Stats, SummaryUsesThePopulationStandardDeviation) {
  const Summary s = summarize({4, 2, 10, 1, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 4);
  EXPECT_NEAR(s.std, std::sqrt(10.0), 1e-12);  // numpy.std: sum of squares 50 / 5
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_EQ(summarize({}).count, 0u);
}

TEST(Stats, ParsesSlos) {
  const Slo slo = parse_slo("ttft:500,tpot:50");
  ASSERT_TRUE(slo.ttft_s && slo.tpot_s);
  EXPECT_DOUBLE_EQ(*slo.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(*slo.tpot_s, 0.05);
  EXPECT_FALSE(slo.e2e_s);
  EXPECT_DOUBLE_EQ(*parse_slo("e2e:1500.5").e2e_s, 1.5005);
  for (const char* bad :
       {"", "ttft", "ttft:", "ttft:0", "ttft:-5", "ttft:5ms", "itl:5", "ttft:5,", "ttft:5;tpot:5"})
    EXPECT_THROW(parse_slo(bad), std::invalid_argument) << bad;
}

TEST(Stats, GoodputNeedsEveryObjective) {
  const Slo slo = parse_slo("ttft:100,tpot:10,e2e:1000");
  EXPECT_TRUE(meets_slo(slo, 0.1, 0.01, 1.0));  // at the bound meets it
  EXPECT_FALSE(meets_slo(slo, 0.11, 0.01, 0.5));
  EXPECT_FALSE(meets_slo(slo, 0.05, 0.02, 0.5));
  EXPECT_FALSE(meets_slo(slo, 0.05, 0.005, 1.2));
  EXPECT_TRUE(meets_slo(slo, 0.05, std::nullopt, 0.5));  // one-token answer: no TPOT
  EXPECT_TRUE(meets_slo(Slo{}, 100, 100, 100));
}

Workload synthetic_workload(WorkloadConfig c) {
  std::vector<int32_t> pool(300);
  std::iota(pool.begin(), pool.end(), 1000);
  std::vector<std::string> words;
  for (int i = 0; i < 100; ++i) words.push_back("w" + std::to_string(i));
  return Workload(c, {}, pool, words, 1.0);
}

TEST(Workload, SyntheticPromptsShareNoPrefixByChance) {
  WorkloadConfig c;
  c.input_len = parse_length_dist(64, "fixed");
  c.output_len = parse_length_dist(4, "fixed");
  Workload w = synthetic_workload(c);
  std::set<std::vector<int32_t>> heads;
  for (int i = 0; i < 500; ++i) {
    const RequestSpec s = w.first_turn();
    ASSERT_EQ(s.prompt_ids.size(), 64u);
    EXPECT_EQ(s.group, -1);
    heads.insert(std::vector<int32_t>(s.prompt_ids.begin(), s.prompt_ids.begin() + 16));
  }
  EXPECT_EQ(heads.size(), 500u) << "two prompts began with the same 16 tokens";
}

TEST(Workload, SharedPrefixGroupsShareTheirSystemPromptAndNothingElse) {
  WorkloadConfig c;
  c.input_len = parse_length_dist(16, "fixed");
  c.output_len = parse_length_dist(4, "fixed");
  c.shared_prefix_groups = 3;
  c.shared_prefix_len = 48;
  Workload w = synthetic_workload(c);
  std::map<int, std::vector<int32_t>> prefix;
  std::set<std::vector<int32_t>> questions;
  for (int i = 0; i < 60; ++i) {
    const RequestSpec s = w.first_turn();
    ASSERT_GE(s.group, 0);
    ASSERT_LT(s.group, 3);
    ASSERT_EQ(s.prompt_ids.size(), 48u + 16u);
    const std::vector<int32_t> head(s.prompt_ids.begin(), s.prompt_ids.begin() + 48);
    if (!prefix.count(s.group)) prefix[s.group] = head;
    EXPECT_EQ(head, prefix[s.group]) << "group " << s.group;
    questions.insert(std::vector<int32_t>(s.prompt_ids.begin() + 48, s.prompt_ids.end()));
  }
  EXPECT_EQ(prefix.size(), 3u) << "every group drawn";
  EXPECT_NE(prefix[0], prefix[1]);
  EXPECT_EQ(questions.size(), 60u) << "each question its own";
  // Chat: the group's system message, then the question; the same seed gives the same groups.
  c.chat = true;
  Workload chat = synthetic_workload(c);
  const RequestSpec s = chat.first_turn();
  ASSERT_EQ(s.messages.size(), 2u);
  EXPECT_EQ(s.messages[0].role, "system");
  EXPECT_EQ(s.messages[1].role, "user");
  Workload again = synthetic_workload(c);
  EXPECT_EQ(again.first_turn().messages[0].content, s.messages[0].content);
}

}  // namespace
}  // namespace rill::loadtest
