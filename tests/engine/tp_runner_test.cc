// The tensor-parallel group's failure handling (engine/tp/tp_runner.h), with ranks that stand in
// for a GPU rank stuck in a collective: a rank waiting for one that failed or never comes is
// released (the group aborts its collectives) and the call throws naming the call and the stage
// each unfinished rank was in, instead of hanging; the group then refuses every later call.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "engine/error.h"
#include "engine/tp/host_collective.h"
#include "engine/tp/tp_runner.h"
#include "engine/tp/tp_stage.h"

namespace rill {
namespace {

// A rank whose launch does what the test says: return, throw, or wait in the host collective
// (as a GPU rank waits in a collective for its peers).
enum class Act { kReturn, kThrow, kWait, kThrowLate };

class FakeRank final : public ModelRunner {
 public:
  FakeRank(int rank, std::shared_ptr<tp::HostCollective> host, Act launch)
      : rank_(rank), host_(std::move(host)), launch_(launch) {}
  std::string name() const override { return "fake"; }
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { throw Error(ErrorCode::kInternal, "no kv"); }
  void add_sequence(const SequenceSpec&) override {}
  void remove_sequence(SeqId) override {}
  void restart_sampling(SeqId, const SamplingParams&) override {}
  int host_kv_blocks() const override { return 0; }
  int host_kv_blocks_free() const override { return 0; }
  void offload_sequence(SeqId) override {}
  void restore_sequence(SeqId) override {}
  bool restore_done(SeqId) override { return true; }
  std::vector<KvTransfer> completed_transfers() override { return {}; }
  void launch(std::span<const StepInput>) override {
    if (launch_ == Act::kThrowLate) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    if (launch_ == Act::kThrow || launch_ == Act::kThrowLate)
      throw Error(ErrorCode::kResourceExhausted, "rank out of memory");
    if (launch_ == Act::kWait) {
      tp::set_stage("the fake all-reduce");
      host_->min(rank_, 0);  // the other rank never comes
    }
  }
  StepOutput finish() override { return {}; }
  void supply_masks(std::span<const LateMask>) override {}

 private:
  int rank_;
  std::shared_ptr<tp::HostCollective> host_;
  Act launch_;
  ModelConfig config_;
};

std::unique_ptr<tp::TpRunner> group(Act rank0, Act rank1) {
  auto host = std::make_shared<tp::HostCollective>(2);
  return std::make_unique<tp::TpRunner>(2, ModelConfig{}, host, [host, rank0, rank1](int r) {
    return std::make_unique<FakeRank>(r, host, r == 0 ? rank0 : rank1);
  });
}

std::string launch_error(tp::TpRunner& g, ErrorCode* code = nullptr) {
  try {
    g.launch({});
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "no error";
}

TEST(TpRunnerFailure, WatchdogEndsACallThatHangsAndNamesTheStage) {
  auto g = group(Act::kReturn, Act::kWait);
  g->set_watchdog(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = launch_error(*g);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(what.find("launch did not finish within"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1 in the fake all-reduce"), std::string::npos) << what;
  // The group is broken: later calls fail at once.
  EXPECT_NE(launch_error(*g).find("diverged"), std::string::npos);
}

TEST(TpRunnerFailure, ARankThatThrowsReleasesTheRankWaitingForIt) {
  auto g = group(Act::kThrow, Act::kWait);
  g->set_watchdog(std::chrono::milliseconds(200));  // also the grace after a rank's failure
  ErrorCode code{};
  const std::string what = launch_error(*g, &code);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);  // the failing rank's own error
  EXPECT_NE(what.find("rank out of memory"), std::string::npos) << what;
  EXPECT_NE(launch_error(*g).find("diverged"), std::string::npos);
}

// The failure's grace (here the watchdog's 300 ms) starts 150 ms after the call, so the watchdog
// comes due first: the failing rank's error is still what the call reports.
TEST(TpRunnerFailure, ARankFailingLateIsReportedWhenTheWatchdogComesDueFirst) {
  auto g = group(Act::kWait, Act::kThrowLate);
  g->set_watchdog(std::chrono::milliseconds(300));
  ErrorCode code{};
  const std::string what = launch_error(*g, &code);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted) << what;
  EXPECT_NE(what.find("rank out of memory"), std::string::npos) << what;
  EXPECT_NE(launch_error(*g).find("diverged"), std::string::npos);
}

TEST(TpRunnerFailure, AllRanksThrowingAlikeKeepsTheGroup) {
  auto g = group(Act::kThrow, Act::kThrow);
  EXPECT_NE(launch_error(*g).find("rank out of memory"), std::string::npos);
  EXPECT_NE(launch_error(*g).find("rank out of memory"), std::string::npos);  // not "diverged"
}

TEST(TpRunnerFailure, ARankFailingToStartReleasesTheOthers) {
  setenv("RILL_TP_WATCHDOG_S", "1", 1);
  auto host = std::make_shared<tp::HostCollective>(2);
  try {
    tp::TpRunner g(2, ModelConfig{}, host, [host](int r) -> std::unique_ptr<ModelRunner> {
      if (r == 1) throw Error(ErrorCode::kResourceExhausted, "weights do not fit rank 1");
      host->min(r, 0);  // as the KV pool's agreement: waits for rank 1
      return std::make_unique<FakeRank>(r, host, Act::kReturn);
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights do not fit rank 1"), std::string::npos)
        << e.what();
  }
  setenv("RILL_TP_WATCHDOG_S", "x", 1);
  try {
    group(Act::kReturn, Act::kReturn);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RILL_TP_WATCHDOG_S"), std::string::npos) << e.what();
  }
  unsetenv("RILL_TP_WATCHDOG_S");
}

}  // namespace
}  // namespace rill
