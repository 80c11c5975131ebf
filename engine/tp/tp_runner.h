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
  /// constructors may meet in collectives). `host` is the group's host collective (aborted when
  /// a rank fails, so the others stop waiting); `config` the whole model's. A rank that throws
  /// makes the constructor throw its error (rank 0's first).
  TpRunner(int world, ModelConfig config, std::shared_ptr<HostCollective> host,
           std::function<std::unique_ptr<ModelRunner>(int rank)> make_rank);
  ~TpRunner() override;

  std::string name() const override;
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { return ranks_[0]->kv(); }
  int world() const { return world_; }
  /// Rank r's runner (for tests and benchmarks; call it only from outside a step).
  ModelRunner& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }

  void add_sequence(const SequenceSpec& spec) override;
  void remove_sequence(SeqId id) override;
  void restart_sampling(SeqId id, const SamplingParams& sampling) override;
  int host_kv_blocks() const override { return ranks_[0]->host_kv_blocks(); }
  int host_kv_blocks_free() const override { return ranks_[0]->host_kv_blocks_free(); }
  void offload_sequence(SeqId id) override;
  void restore_sequence(SeqId id) override;
  bool restore_done(SeqId id) override;
  std::vector<KvTransfer> completed_transfers() override;
  void launch(std::span<const StepInput> inputs) override;
  StepOutput finish() override;
  int max_step_sequences() const override { return ranks_[0]->max_step_sequences(); }
  int max_step_tokens() const override { return ranks_[0]->max_step_tokens(); }
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
  };
  void work(int rank);
  /// Runs fn(rank, runner) on every rank's thread and waits for all. When ranks throw, the
  /// group is marked broken unless all of them threw (the same validation everywhere leaves
  /// them in step), and rank 0's error is rethrown (else the first).
  void run_all(const std::function<void(int rank)>& fn);
  void check_usable() const;

  const int world_;
  ModelConfig config_;
  std::shared_ptr<HostCollective> host_;
  std::vector<std::unique_ptr<ModelRunner>> ranks_;
  std::vector<std::unique_ptr<Worker>> workers_;
  bool broken_ = false;  // ranks diverged: every later call fails
};

}  // namespace rill::tp
