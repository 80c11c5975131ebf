#include "engine/util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace rill {
namespace {

// Every index of [0, n) is visited exactly once, whatever the split.
void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      },
      grain);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
}

TEST(ThreadPool, CoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  for (int64_t n : {1, 2, 3, 7, 769, 5125}) expect_each_index_once(pool, n, 1);
  expect_each_index_once(pool, 769, 100);
  expect_each_index_once(pool, 769, 10000);  // one chunk
}

TEST(ThreadPool, EmptyRangeCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.parallel_for(0, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPool, ReusedManyTimes) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 200; ++round)
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
  EXPECT_EQ(sum.load(), 200 * 4950);
}

}  // namespace
}  // namespace rill
