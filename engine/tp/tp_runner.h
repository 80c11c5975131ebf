// The tensor-parallel runner: one ModelRunner interface over `world` rank runners, each owned by
// a worker thread of its own (a GPU's runner lives on the thread that made its device current).
// Every call runs on every rank, concurrently, and returns rank 0's result: the ranks hold the
// same sequences, make the same KV-block decisions and sample the same tokens (they see the same
// gathered logits), so the scheduler and the server drive the group as one runner.
//
// Why threads in one process, not a process per GPU: the scheduler's calls reach every rank
// without serialising step inputs, a rank's error surfaces as the same exception at the same
// call, the checkpoint is mapped once, and NCCL takes one communicator per thread as it takes one
// per process (docs/tensor_parallel.md).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/runner/runner.h"
#include "engine/tp/host_collective.h"

namespace rill::tp {

class TpRunner final : public ModelRunner {
 public:
  /// Builds rank r's runner with make_rank(r) on worker thread r (all ranks at once: their
  /// constructors may meet in collectives). `host` is the group's host collective and
  /// `abort_devices` ends its device communicators (both from any thread): the group aborts them
  /// when its ranks diverge, so that no rank waits forever for one that failed. `config` is the
  /// whole model's. A rank that throws makes the constructor throw the first error.
  ///
  /// The watchdog: a call the ranks do not all finish within RILL_TP_WATCHDOG_S seconds
  /// (default 600, 0 off; read here) aborts the group and throws kInternal naming the call and
  /// each unfinished rank's stage (tp::set_stage); a rank that throws while others have not
  /// finished 5 s later aborts the group too.
  TpRunner(int world, ModelConfig config, std::shared_ptr<HostCollective> host,
           std::function<std::unique_ptr<ModelRunner>(int rank)> make_rank,
           std::function<void()> abort_devices = {});
  ~TpRunner() override;

  std::string name() const override;
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { return ranks_[0]->kv(); }
  int world() const { return world_; }
  /// Rank r's runner (for tests and benchmarks; call it only from outside a step).
  ModelRunner& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  /// The watchdog's limit for later calls (0: off).
  void set_watchdog(std::chrono::milliseconds limit) { watchdog_ = limit; }

  void add_sequence(const SequenceSpec& spec) override;
  void remove_sequence(SeqId id) override;
  void restart_sampling(SeqId id, const SamplingParams& sampling) override;
  int host_kv_blocks() const override { return ranks_[0]->host_kv_blocks(); }
  int host_kv_blocks_free() const override { return ranks_[0]->host_kv_blocks_free(); }
  int releasing_blocks() const override { return ranks_[0]->releasing_blocks(); }  // as kv()
  void offload_sequence(SeqId id) override;
  void restore_sequence(SeqId id) override;
  bool restore_done(SeqId id) override;
  std::vector<KvTransfer> completed_transfers() override;
  void launch(std::span<const StepInput> inputs) override;
  StepOutput finish() override;
  void supply_masks(std::span<const LateMask> masks) override;
  int max_step_sequences() const override { return ranks_[0]->max_step_sequences(); }
  int max_step_tokens() const override { return ranks_[0]->max_step_tokens(); }
  int prefill_token_granularity() const override {
    return ranks_[0]->prefill_token_granularity();
  }
  double last_step_device_ms() const override { return ranks_[0]->last_step_device_ms(); }

 private:
  struct Worker {
    std::thread thread;
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> job;  // set by run_all
    bool busy = false;          // a job is set and not yet done
    bool stop = false;
    std::exception_ptr error;
    std::atomic<const char*> stage{"idle"};  // tp::set_stage on this thread
  };
  using Clock = std::chrono::steady_clock;
  void work(int rank);
  /// Runs fn(rank) on every rank's thread and waits for all (`call` names it in errors and
  /// traces). When all ranks throw (the same validation everywhere leaves them in step) the
  /// first error is rethrown and the group stays usable; when only some do, or the watchdog
  /// fires, the group is aborted (abort_group) and marked broken, and the error rethrown.
  void run_all(const char* call, const std::function<void(int rank)>& fn);
  /// Waits until every rank's job is done, aborting the group on a divergence or the watchdog;
  /// returns the watchdog's message ("" when it did not fire).
  std::string wait_all(const char* call);
  /// Ends the host collective and the device communicators (once; any thread).
  void abort_group();
  void stop_workers();
  void check_usable() const;

  const int world_;
  ModelConfig config_;
  std::shared_ptr<HostCollective> host_;
  std::function<void()> abort_devices_;
  std::atomic<bool> aborted_ = false;
  std::chrono::milliseconds watchdog_;
  std::vector<std::unique_ptr<ModelRunner>> ranks_;
  std::vector<std::unique_ptr<Worker>> workers_;
  // The jobs of the current run_all: how many are done and failed, when the first failed.
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  int done_ = 0, failed_ = 0, first_failed_ = -1;
  Clock::time_point first_failure_at_;
  bool broken_ = false;  // ranks diverged: every later call fails
};

}  // namespace rill::tp
