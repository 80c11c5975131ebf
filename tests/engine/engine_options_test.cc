// The engine option table (engine/runner/engine_options.h) that the server's and the tools'
// flags are built from: one spelling per option, and the checks every program shares.
#include "engine/runner/engine_options.h"

#include <gtest/gtest.h>

#include <set>

namespace rill {
namespace {

const EngineOption& row(std::vector<EngineOption>& t, const std::string& key) {
  for (const EngineOption& o : t)
    if (o.key == key) return o;
  throw std::runtime_error("no option " + key);
}

TEST(EngineOptions, EachOptionHasOneSpellingDerivedFromItsKey) {
  EngineOptions o;
  std::set<std::string> flags;
  for (const EngineOption& opt : engine_option_table(o)) {
    std::string expect = std::string("--") + opt.key;
    for (char& c : expect)
      if (c == '_') c = '-';
    EXPECT_EQ(opt.flag, expect) << opt.key;
    EXPECT_TRUE(flags.insert(opt.flag).second) << opt.flag;
    EXPECT_EQ(engine_option_problem(opt), "") << opt.key << ": the defaults are valid";
    const bool number = !std::holds_alternative<std::string*>(opt.target) &&
                        !std::holds_alternative<bool*>(opt.target);
    EXPECT_EQ(opt.range.has_value(), number) << opt.key << ": every number is bounded";
  }
  EXPECT_TRUE(flags.count("--cuda-graphs") && flags.count("--cpu-threads"));
}

TEST(EngineOptions, ProblemsNameTheLimitAndTheValue) {
  EngineOptions o;
  std::vector<EngineOption> t = engine_option_table(o);
  o.block_size = 12;
  EXPECT_EQ(engine_option_problem(row(t, "block_size")),
            "must be a power of two in [1, 1024] (got 12)");
  o.block_size = 2048;
  EXPECT_EQ(engine_option_problem(row(t, "block_size")), "must be in [1, 1024] (got 2048)");
  o.gpu_memory_fraction = 0;
  EXPECT_EQ(engine_option_problem(row(t, "gpu_memory_fraction")), "must be in (0, 1] (got 0)");
  o.device = "gpu";
  EXPECT_EQ(engine_option_problem(row(t, "device")), "must be auto, cpu or cuda (got 'gpu')");
  o.kv_cache_dtype = "int8";
  EXPECT_EQ(engine_option_problem(row(t, "kv_cache_dtype")), "must be auto or fp8 (got 'int8')");
}

}  // namespace
}  // namespace rill
