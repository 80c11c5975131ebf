// Request and session ids: the ids the engine assigns are 128 random bits (no shared prefix, no
// counter), ids over the limit are refused naming it, and a client-given request id is found by
// ServingEngine::cancel only in its own scope while an assigned one is found from any scope.
#include <gtest/gtest.h>

#include <bitset>
#include <set>

#include "engine/serving/ids.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::EngineFixture;
using testing::random_prompt;

// The 128 bits of an id made by random_id(prefix); fails the test on any other shape.
std::bitset<128> id_bits(const std::string& id, const std::string& prefix) {
  EXPECT_EQ(id.rfind(prefix, 0), 0u) << id;
  EXPECT_EQ(id.size(), prefix.size() + 32) << id;
  std::bitset<128> bits;
  for (size_t i = 0; i < 32 && prefix.size() + i < id.size(); ++i) {
    const char c = id[prefix.size() + i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    EXPECT_TRUE(hex) << id;
    const int v = hex ? (c <= '9' ? c - '0' : c - 'a' + 10) : 0;
    for (int b = 0; b < 4; ++b) bits[4 * i + b] = (v >> b) & 1;
  }
  return bits;
}

// Ids as random as 128 bits should be: all distinct, every bit seen both ways (a counter or a
// fixed salt leaves high bits constant: chance 2^-63 per bit for 64 random ids), and consecutive
// ids far apart (a counter changes a few low bits).
void expect_random_ids(const std::vector<std::string>& ids, const std::string& prefix) {
  ASSERT_GE(ids.size(), 64u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
  std::bitset<128> ones, zeros;
  std::bitset<128> previous = id_bits(ids[0], prefix);
  size_t min_distance = 128;
  for (const std::string& id : ids) {
    const std::bitset<128> bits = id_bits(id, prefix);
    ones |= bits;
    zeros |= ~bits;
    if (&id != &ids[0]) min_distance = std::min(min_distance, (bits ^ previous).count());
    previous = bits;
  }
  EXPECT_TRUE(ones.all()) << "bits never set: " << (~ones).to_string();
  EXPECT_TRUE(zeros.all()) << "bits never clear: " << (~zeros).to_string();
  EXPECT_GE(min_distance, 20u);  // binomial(128, 1/2): under 20 has chance ~1e-18 per pair
}

TEST(Ids, RandomIdsAre128BitsFromTheCsprng) {
  std::vector<std::string> ids;
  for (int i = 0; i < 256; ++i) ids.push_back(random_id("x-"));
  expect_random_ids(ids, "x-");
}

TEST(Ids, LengthLimitNamesTheLimit) {
  EXPECT_NO_THROW(check_id_length(std::string(kMaxIdBytes, 'a'), "request id"));
  try {
    check_id_length(std::string(100000, 'a'), "request id");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "request id is 100000 bytes, over the limit of 128");
  }
}

TEST(Ids, AssignedSessionAndRequestIdsAreRandom) {
  SchedulerConfig cfg;
  cfg.max_sessions = 100;
  EngineFixture f(cfg);
  std::vector<std::string> sessions, requests;
  for (int i = 0; i < 64; ++i) {
    SessionOptions o;
    o.cache = CachePolicy::streaming(4, 60);
    sessions.push_back(f.engine->create_session(o).options.id);
    Request r;
    r.prompt = random_prompt(3, i);
    r.max_tokens = 0;
    RequestHandle h = f.engine->submit(r);
    requests.push_back(h.id());
    collect(h);
  }
  expect_random_ids(sessions, "sess-");
  expect_random_ids(requests, "req-");
}

Request long_request(const std::string& id, const std::string& scope) {
  Request r;
  r.id = id;
  r.id_scope = scope;
  r.prompt = random_prompt(4, 11);
  r.max_tokens = 100000;
  r.ignore_eos = true;
  r.cache = CachePolicy::streaming(4, 60);
  return r;
}

// A client-given id is the client's own: another scope can neither cancel it nor be refused
// for using the same id; an assigned (unguessable) id is a capability, found from any scope.
TEST(Ids, ClientIdsAreCancelledOnlyInTheirScope) {
  EngineFixture f;
  RequestHandle mine = f.engine->submit(long_request("mine", "peer A"));
  EXPECT_FALSE(f.engine->cancel("mine", "peer B"));
  EXPECT_FALSE(f.engine->cancel("mine"));
  RequestHandle theirs = f.engine->submit(long_request("mine", "peer B"));
  EXPECT_TRUE(f.engine->cancel("mine", "peer B"));
  EXPECT_EQ(collect(theirs).final.reason, FinishReason::kCancelled);
  EXPECT_TRUE(f.engine->cancel("mine", "peer A"));
  EXPECT_EQ(collect(mine).final.reason, FinishReason::kCancelled);

  RequestHandle assigned = f.engine->submit(long_request("", "peer A"));
  EXPECT_EQ(assigned.id().rfind("req-", 0), 0u);
  EXPECT_TRUE(f.engine->cancel(assigned.id(), "peer C"));
  EXPECT_EQ(collect(assigned).final.reason, FinishReason::kCancelled);

  // Within one scope an id is unique among live requests.
  RequestHandle first = f.engine->submit(long_request("dup", "peer A"));
  try {
    f.engine->submit(long_request("dup", "peer A"));
    ADD_FAILURE() << "a duplicate id in one scope was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  first.cancel();
  collect(first);
}

TEST(Ids, RequestIdsOverTheLimitAreRefused) {
  EngineFixture f;
  Request r = long_request(std::string(kMaxIdBytes + 1, 'r'), "peer A");
  r.max_tokens = 1;
  try {
    f.engine->submit(r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("over the limit of 128"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rill
