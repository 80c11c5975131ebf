// StopFilter: nothing that could begin a stop string leaves before it is ruled out; matches
// across token boundaries cut the text where the stop string starts.
#include <gtest/gtest.h>

#include "engine/serving/metrics_registry.h"
#include "engine/serving/stop_filter.h"

namespace rill {
namespace {

struct Fed {
  std::vector<int32_t> ids;
  std::string text;
};

Fed feed(StopFilter& f, const std::vector<std::string>& pieces, std::vector<std::string>* chunks = nullptr) {
  Fed out;
  int32_t id = 0;
  for (const std::string& p : pieces) {
    f.add(id++, p, nullptr);
    TokenChunk c;
    f.take_ready(c);
    out.ids.insert(out.ids.end(), c.ids.begin(), c.ids.end());
    out.text += c.text;
    if (chunks) chunks->push_back(c.text);
  }
  return out;
}

TEST(StopFilter, WithoutStopsEverythingGoesAtOnce) {
  StopFilter f({});
  std::vector<std::string> chunks;
  const Fed out = feed(f, {"a", "b", ""}, &chunks);
  EXPECT_EQ(chunks, (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(out.ids.size(), 3u);
}

TEST(StopFilter, MatchAcrossTokensCutsWhereTheStopStarts) {
  StopFilter f({"END"});
  std::vector<std::string> chunks;
  const Fed out = feed(f, {"hello ", "wor", "ld E", "N", "D and more"}, &chunks);
  EXPECT_TRUE(f.matched());
  EXPECT_EQ(f.matched_stop(), "END");
  EXPECT_EQ(out.text, "hello world ");
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0, 1, 2}));  // the token holding "E" goes with the cut
  for (const std::string& c : chunks) EXPECT_EQ(c.find('E'), std::string::npos) << c;
}

TEST(StopFilter, HeldBackTextIsReleasedWhenItTurnsOutHarmless) {
  StopFilter f({"\n\n"});
  std::vector<std::string> chunks;
  const Fed out = feed(f, {"a\n", "b"}, &chunks);
  EXPECT_FALSE(f.matched());
  EXPECT_EQ(chunks[0], "");  // "a\n" might start "\n\n"
  EXPECT_EQ(chunks[1], "a\nb");
  EXPECT_EQ(out.text, "a\nb");
}

TEST(StopFilter, RestIsReleasedAtTheEnd) {
  StopFilter f({"xyz"});
  feed(f, {"ab", "x"});
  TokenChunk rest;
  f.add_text("y");
  f.take_rest(rest);
  EXPECT_EQ(rest.text, "xy");
  EXPECT_EQ(rest.ids, (std::vector<int32_t>{1}));
}

TEST(StopFilter, EarliestOfSeveralStopsWins) {
  StopFilter f({"cd", "b"});
  const Fed out = feed(f, {"abcd"});
  EXPECT_EQ(f.matched_stop(), "b");
  EXPECT_EQ(out.text, "a");
}

TEST(StopFilter, StopAtTheVeryStartStreamsNothing) {
  StopFilter f({"ab"});
  const Fed out = feed(f, {"a", "b", "c"});
  EXPECT_TRUE(f.matched());
  EXPECT_EQ(out.text, "");
  EXPECT_EQ(out.ids, (std::vector<int32_t>{0}));
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeAndLabelsKept) {
  MetricsRegistry r(MetricLabels{{"model_name", "m"}});
  Histogram& h = r.histogram("lat_seconds", "help", {0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.002, 0.05, 3.0}) h.observe(v);
  r.counter("c_total", "c", {{"reason", "stop"}}).add(2);
  r.counter("c_total", "c", {{"reason", "stop"}}).add(1);
  const auto snap = r.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].series[0].histogram.cumulative, (std::vector<uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(snap[0].series[0].histogram.count, 5u);
  EXPECT_NEAR(snap[0].series[0].histogram.sum, 3.0535, 1e-12);
  EXPECT_EQ(snap[1].series.size(), 1u);
  EXPECT_EQ(snap[1].series[0].value, 3);
  EXPECT_EQ(snap[1].series[0].labels, (MetricLabels{{"model_name", "m"}, {"reason", "stop"}}));
  EXPECT_THROW(r.gauge("c_total", "c"), Error);
  EXPECT_THROW(Histogram({0.1, 0.1}), Error);
}

}  // namespace
}  // namespace rill
