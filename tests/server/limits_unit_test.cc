// Unit tests of the server's limits: every configured size, count and duration has a
// documented maximum (docs/api.md#limits) and a value past it is refused naming the field; the
// configuration file must be a readable file; the HTTP connection table (cap, idle eviction,
// refusals), the budget of buffered request bodies and the log throttle.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/scheduler/scheduler_config.h"
#include "server/http_limits.h"
#include "server/server_config.h"

namespace rill::server {
namespace {

std::string temp_path(const std::string& suffix) {
  static int n = 0;
  return (std::filesystem::temp_directory_path() /
          ("rill_limits_" + std::to_string(getpid()) + "_" + std::to_string(n++) + suffix))
      .string();
}

// The error validate_config(load_config_file(json)) throws, or "" when the file is valid.
std::string file_error(const std::string& json) {
  const std::string path = temp_path(".json");
  std::ofstream(path) << json;
  std::string what;
  try {
    validate_config(load_config_file(path));
  } catch (const Error& e) {
    what = e.what();
  }
  std::filesystem::remove(path);
  return what;
}

TEST(ConfigLimits, ValuesPastTheirMaximumAreRefusedNamingTheField) {
  // 9.3e12 ms wrapped the steady clock: every request ended "deadline", every session expired.
  EXPECT_NE(file_error(R"({"scheduler": {"queue_timeout_ms": 9300000000000}})")
                .find("scheduler.queue_timeout_ms: must be in [1, 2592000000] (got 9300000000000)"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"scheduler": {"session_idle_ttl_ms": 9300000000000}})")
                .find("scheduler.session_idle_ttl_ms"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"scheduler": {"stall_timeout_ms": 0}})").find("stall_timeout_ms"),
            std::string::npos);
  // 0 refused every request as overloaded.
  EXPECT_NE(file_error(R"({"scheduler": {"max_queued_requests": 0}})")
                .find("scheduler.max_queued_requests"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"engine": {"cpu_kv_cache_bytes": 9223372036854775807}})")
                .find("engine.cpu_kv_cache_bytes: must be in [1, 1099511627776] (got "
                      "9223372036854775807)"),
            std::string::npos);
  // An unsigned beyond int64 must not wrap into range.
  EXPECT_NE(file_error(R"({"max_body_bytes": 18446744073709551615})").find("max_body_bytes"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"max_connections": 0})").find("max_connections"), std::string::npos);
  EXPECT_NE(file_error(R"({"max_buffered_body_bytes": 4096})")
                .find("max_buffered_body_bytes: must be at least max_body_bytes (1048576)"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"engine": {"gpu_memory_fraction": 0}})").find("(0, 1]"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"scheduler": {"kv_watermark": 1}})").find("[0, 1)"), std::string::npos);
  EXPECT_NE(file_error(R"({"host": "localhost"})").find("host: must be an IPv4 or IPv6"),
            std::string::npos);
  EXPECT_NE(file_error(R"({"served_model_name": "a\u0001b"})").find("served_model_name"),
            std::string::npos);
  EXPECT_NE(file_error("{\"served_model_name\": \"" + std::string(300, 'x') + "\"}")
                .find("served_model_name: must be at most 256 bytes"),
            std::string::npos);
  // The maxima themselves are accepted.
  EXPECT_EQ(file_error(R"({"host": "::1", "served_model_name": "we\"ird\\name", "scheduler":
      {"queue_timeout_ms": 2592000000, "session_idle_ttl_ms": 2592000000, "max_queued_requests": 1},
      "engine": {"cpu_kv_cache_bytes": 1099511627776}, "max_connections": 1000000})"),
            "");
}

TEST(ConfigLimits, TheDurationMaximumIsTheSchedulers) {
  EXPECT_EQ(kMaxSchedulerDuration.count(), 2'592'000'000);
  bool found = false;
  for (const ConfigFieldInfo& f : config_fields()) {
    // Latency targets are not deadlines: 0 (auto) to an hour (latency_targets.h).
    if (!f.path.ends_with("_ms") || f.path.ends_with("_target_ms")) continue;
    EXPECT_EQ(f.range, "[1, 2592000000]") << f.path;
    found = true;
  }
  EXPECT_TRUE(found);
}

// docs/api.md's limits table lists every numeric setting with its flag and range.
TEST(ConfigLimits, EveryRangeIsDocumented) {
  std::ifstream in(std::string(RILL_SOURCE_DIR) + "/docs/api.md");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> lines;
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  for (const ConfigFieldInfo& f : config_fields()) {
    if (f.range.empty()) continue;
    bool documented = false;
    for (const std::string& line : lines)
      documented |= line.starts_with("| `" + f.path + "`") &&
                    line.find("`" + f.flag + "`") != std::string::npos &&
                    line.find(f.range) != std::string::npos;
    EXPECT_TRUE(documented) << f.path << " " << f.flag << " " << f.range
                            << " has no row in docs/api.md's settings table";
  }
}

TEST(ConfigLimits, AConfigurationFileMustBeAReadableFile) {
  const std::string dir = temp_path("_dir");
  std::filesystem::create_directory(dir);
  try {
    load_config_file(dir);
    ADD_FAILURE() << "a directory was read as a configuration";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config " + dir + ": is a directory"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(dir);
  try {
    load_config_file(dir + "/missing.json");
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json: no such file"), std::string::npos);
  }
  EXPECT_THROW(load_config_file("/dev/null"), Error);  // not a regular file
}

TEST(ConfigLimits, TheStartLineLeavesOutSchedulerFieldsTheRunnerDecides) {
  ServerConfig c;
  c.scheduler.max_num_seqs = 7;
  c.explicit_fields.insert("scheduler.max_num_seqs");
  const std::string start = config_to_json(c, /*unset_scheduler=*/false);
  EXPECT_NE(start.find(R"("max_num_seqs":7)"), std::string::npos) << start;
  EXPECT_EQ(start.find("max_num_batched_tokens"), std::string::npos) << start;
  SchedulerConfig cpu;
  cpu.max_num_batched_tokens = 512;
  apply_scheduler_defaults(c, cpu);
  const std::string in_force = scheduler_to_json(c);
  EXPECT_NE(in_force.find(R"("max_num_batched_tokens":512)"), std::string::npos) << in_force;
  EXPECT_NE(in_force.find(R"("max_num_seqs":7)"), std::string::npos) << in_force;
}

TEST(HttpLimits, TheConnectionCapFitsTheDescriptorLimit) {
  EXPECT_EQ(connection_cap(10'000, 1'048'576), 10'000);
  EXPECT_EQ(connection_cap(10'000, UINT64_MAX), 10'000);
  EXPECT_EQ(connection_cap(10'000, 1024), 1024 - kReservedFds - kMaxRefusing - 1);
  EXPECT_EQ(connection_cap(10'000, 100), 1);
  EXPECT_EQ(connection_cap(5, 1024), 5);
}

TEST(HttpLimits, AtTheCapTheLongestIdleConnectionMakesRoom) {
  ConnectionTable t(3);
  ConnectionTable::Evict none;
  const uint64_t a = t.admit(&none), b = t.admit(&none), c = t.admit(&none);
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(none);
  // All busy: refused.
  EXPECT_EQ(t.admit(&none), 0u);
  EXPECT_FALSE(none);
  std::vector<uint64_t> evicted;
  t.set_idle(b, [&] { evicted.push_back(b); });
  t.set_idle(a, [&] { evicted.push_back(a); });
  ConnectionTable::Evict e;
  const uint64_t d = t.admit(&e);
  ASSERT_NE(d, 0u);
  ASSERT_TRUE(e);
  e();
  EXPECT_EQ(evicted, std::vector<uint64_t>{b});  // idle longest
  EXPECT_EQ(t.open(), 3);
  EXPECT_FALSE(t.set_busy(b));  // it was evicted: it must close
  t.release(b);                 // its close: a no-op
  EXPECT_EQ(t.open(), 3);
  // A connection that got its first byte is no longer evictable.
  EXPECT_TRUE(t.set_busy(a));
  EXPECT_EQ(t.idle(), 0);
  EXPECT_FALSE(t.evict_longest_idle());
  t.release(c);
  EXPECT_EQ(t.open(), 2);
  ConnectionTable::Evict unused;
  EXPECT_NE(t.admit(&unused), 0u);
  EXPECT_FALSE(unused);
}

TEST(HttpLimits, RefusalsUnderWayAreBounded) {
  ConnectionTable t(1);
  for (int i = 0; i < kMaxRefusing; ++i) EXPECT_TRUE(t.begin_refusal());
  EXPECT_FALSE(t.begin_refusal());
  t.end_refusal();
  EXPECT_TRUE(t.begin_refusal());
}

TEST(HttpLimits, TheBodyBudgetNeverPassesItsMaximum) {
  BodyBudget b(1000);
  EXPECT_TRUE(b.try_charge(600));
  EXPECT_FALSE(b.try_charge(401));
  EXPECT_EQ(b.used(), 600);
  EXPECT_TRUE(b.try_charge(400));
  EXPECT_FALSE(b.try_charge(1));
  b.release(1000);
  EXPECT_EQ(b.used(), 0);
  EXPECT_FALSE(b.try_charge(1001));
}

TEST(HttpLimits, TheLogThrottleWritesOneLinePerPeriod) {
  LogThrottle t(std::chrono::seconds(10));
  const auto t0 = LogThrottle::Clock::now();
  EXPECT_EQ(t.note(t0), 1);
  for (int i = 1; i < 1000; ++i) EXPECT_EQ(t.note(t0 + std::chrono::milliseconds(i)), 0);
  EXPECT_EQ(t.note(t0 + std::chrono::seconds(11)), 1000);
  EXPECT_EQ(t.note(t0 + std::chrono::seconds(12)), 0);
}

}  // namespace
}  // namespace rill::server
