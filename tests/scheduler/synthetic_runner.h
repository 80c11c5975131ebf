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

namespace rill::testing {

class SyntheticRunner final : public ModelRunner {
 public:
  /// What one step carried, and the time the cost function gave it.
  struct Step {
    int rows = 0;          // one-token inputs (decodes)
    int64_t prefill = 0;   // tokens of longer inputs (prompt chunks)
    int chunks = 0;
    double ms = 0;
  };
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
    Step s;
    std::vector<int32_t> sampled(inputs.size(), -1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const StepInput& in = inputs[i];
      kv_.append(in.id, static_cast<int64_t>(in.tokens.size()));
      if (in.tokens.size() == 1) {
        ++s.rows;
      } else {
        ++s.chunks;
        s.prefill += static_cast<int64_t>(in.tokens.size());
      }
      if (in.sample) sampled[i] = token_;
    }
    s.ms = cost_(s);
    std::lock_guard lock(mu_);
    pending_.push_back({s, std::move(sampled)});
  }
  StepOutput finish() override {
    if (time_scale_ > 0) {
      double ms = 0;
      {
        std::lock_guard lock(mu_);
        if (!pending_.empty()) ms = pending_.front().step.ms;
      }
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms * time_scale_));
    }
    std::lock_guard lock(mu_);
    if (pending_.empty()) throw Error(ErrorCode::kInvalidArgument, "no step in flight");
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    last_ms_ = p.step.ms;
    steps_.push_back(p.step);
    StepOutput out;
    out.logits_row.assign(p.sampled.size(), -1);
    out.sampled = std::move(p.sampled);
    return out;
  }
  double last_step_device_ms() const override {
    std::lock_guard lock(mu_);
    return last_ms_;
  }
  /// Every step finished so far, in order.
  std::vector<Step> steps() const {
    std::lock_guard lock(mu_);
    return steps_;
  }

 private:
  struct Pending {
    Step step;
    std::vector<int32_t> sampled;
  };
  ModelConfig config_;
  KvCacheManager kv_;
  Cost cost_;
  int32_t token_;
  double time_scale_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  bool held_ = false;
  std::deque<Pending> pending_;
  std::vector<Step> steps_;
  double last_ms_ = 0;
};

}  // namespace rill::testing
