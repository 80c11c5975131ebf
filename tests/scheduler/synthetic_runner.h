// A runner without a model: it keeps the caches' block accounting (a KvCacheManager), "samples"
// a fixed token for every sampling input, and reports for each step a device time from a given
// cost function of the step's composition. Scheduling tests drive the serving engine with it to
// see what the planner does to throughput on a device they describe (H100-like costs), at sizes
// the CPU runner could not compute quickly (hundreds of streams, thousands of steps).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/runner/runner.h"
#include "tests/scheduler/step_log.h"

namespace rill::testing {

class SyntheticRunner final : public ModelRunner {
 public:
  using Step = LoggedStep;  // what one step carried, and the time the cost function gave it
  using Cost = std::function<double(const Step&)>;

  /// `config`: the model it claims to run (vocabulary, context); `num_blocks` x `block_size`:
  /// the KV pool; `token`: what every sampling input samples; `time_scale`: finish() takes this
  /// share of the step's synthetic time in real time (0: none), for the scheduler's clocks.
  SyntheticRunner(ModelConfig config, int num_blocks, int block_size, Cost cost, int32_t token,
                  double time_scale = 0)
      : config_(std::move(config)),
        kv_(num_blocks, block_size, config_.max_position_embeddings),
        cost_(std::move(cost)),
        token_(token),
        time_scale_(time_scale) {}

  std::string name() const override { return "synthetic"; }
  const ModelConfig& config() const override { return config_; }
  const KvCacheManager& kv() const override { return kv_; }
  void add_sequence(const SequenceSpec& spec) override {
    kv_.add_sequence(spec.id, spec.cache, spec.prefix ? &*spec.prefix : nullptr);
  }
  void remove_sequence(SeqId id) override { kv_.remove_sequence(id); }
  void restart_sampling(SeqId, const SamplingParams&) override {}
  int host_kv_blocks() const override { return 0; }
  int host_kv_blocks_free() const override { return 0; }
  void offload_sequence(SeqId) override {
    throw Error(ErrorCode::kResourceExhausted, "the synthetic runner has no host memory");
  }
  void restore_sequence(SeqId) override {
    throw Error(ErrorCode::kInternal, "the synthetic runner offloads nothing");
  }
  bool restore_done(SeqId) override { return true; }
  std::vector<KvTransfer> completed_transfers() override { return {}; }
  void supply_masks(std::span<const LateMask>) override {
    throw Error(ErrorCode::kInvalidArgument, "the synthetic runner takes no masks");
  }

  /// Holds every launch until release() (so a test can queue a whole burst before the first
  /// step: synthetic steps take no time, and the engine would otherwise outrun the submissions).
  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    released_.notify_all();
  }

  void launch(std::span<const StepInput> inputs) override {
    {
      std::unique_lock lock(mu_);
      released_.wait(lock, [&] { return !held_; });
    }
    Step s = Step::of(inputs);
    std::vector<int32_t> sampled(inputs.size(), -1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      kv_.append(inputs[i].id, static_cast<int64_t>(inputs[i].tokens.size()));
      if (inputs[i].sample) sampled[i] = token_;
    }
    s.ms = cost_(s);
    {
      std::lock_guard lock(mu_);
      sampled_.push_back(std::move(sampled));
    }
    log_.launched(s);
  }
  StepOutput finish() override {
    if (time_scale_ > 0)
      std::this_thread::sleep_for(
          std::chrono::duration<double, std::milli>(log_.next_ms() * time_scale_));
    StepOutput out;
    {
      std::lock_guard lock(mu_);
      if (sampled_.empty()) throw Error(ErrorCode::kInvalidArgument, "no step in flight");
      out.sampled = std::move(sampled_.front());
      sampled_.pop_front();
    }
    out.logits_row.assign(out.sampled.size(), -1);
    log_.finished();
    return out;
  }
  double last_step_device_ms() const override { return log_.last_ms(); }
  /// Every step finished so far, in order.
  std::vector<Step> steps() const { return log_.steps(); }

 private:
  ModelConfig config_;
  KvCacheManager kv_;
  Cost cost_;
  int32_t token_;
  double time_scale_;
  std::mutex mu_;
  std::condition_variable released_;
  bool held_ = false;
  std::deque<std::vector<int32_t>> sampled_;  // per step in flight: its samples
  StepLog log_;
};

}  // namespace rill::testing
