#include "engine/tp/tp_runner.h"

#include "engine/error.h"

namespace rill::tp {

TpRunner::TpRunner(int world, ModelConfig config, std::shared_ptr<HostCollective> host,
                   std::function<std::unique_ptr<ModelRunner>(int rank)> make_rank)
    : world_(world), config_(std::move(config)), host_(std::move(host)) {
  if (world < 1)
    throw Error(ErrorCode::kInternal, "tensor-parallel world of " + std::to_string(world));
  ranks_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) workers_.push_back(std::make_unique<Worker>());
  for (int r = 0; r < world; ++r)  // after the vector is complete: work() indexes it
    workers_[static_cast<size_t>(r)]->thread = std::thread([this, r] { work(r); });
  try {
    run_all([&](int r) {
      try {
        ranks_[static_cast<size_t>(r)] = make_rank(r);
      } catch (...) {
        if (host_) host_->abort();  // the others may wait for this rank in a collective
        throw;
      }
    });
  } catch (...) {
    broken_ = true;
    run_all([&](int r) { ranks_[static_cast<size_t>(r)].reset(); });
    for (auto& w : workers_) {
      {
        std::lock_guard lock(w->mu);
        w->stop = true;
      }
      w->cv.notify_all();
      w->thread.join();
    }
    throw;
  }
}

TpRunner::~TpRunner() {
  // Each rank is destroyed on its own thread (a GPU's resources with its device current).
  broken_ = false;
  try {
    run_all([&](int r) { ranks_[static_cast<size_t>(r)].reset(); });
  } catch (...) {
  }
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
}

void TpRunner::work(int rank) {
  Worker& w = *workers_[static_cast<size_t>(rank)];
  std::unique_lock lock(w.mu);
  for (;;) {
    w.cv.wait(lock, [&] { return w.stop || w.busy; });
    if (!w.busy) return;
    std::function<void()> job = std::move(w.job);
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    w.error = error;
    w.busy = false;
    w.cv.notify_all();
  }
}

void TpRunner::run_all(const std::function<void(int)>& fn) {
  for (int r = 0; r < world_; ++r) {
    Worker& w = *workers_[static_cast<size_t>(r)];
    std::lock_guard lock(w.mu);
    w.error = nullptr;
    w.job = [&fn, r] { fn(r); };
    w.busy = true;
  }
  for (auto& w : workers_) w->cv.notify_all();
  std::vector<std::exception_ptr> errors;
  for (auto& w : workers_) {
    std::unique_lock lock(w->mu);
    w->cv.wait(lock, [&] { return !w->busy; });
    errors.push_back(w->error);
  }
  int failed = 0;
  for (const auto& e : errors) failed += e != nullptr;
  if (failed == 0) return;
  if (failed != world_) broken_ = true;
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void TpRunner::check_usable() const {
  if (broken_)
    throw Error(ErrorCode::kInternal,
                "tensor parallel: the ranks diverged after a rank failed; restart the server");
}

std::string TpRunner::name() const {
  return ranks_[0]->name();
}

void TpRunner::add_sequence(const SequenceSpec& spec) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->add_sequence(spec); });
}

void TpRunner::remove_sequence(SeqId id) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->remove_sequence(id); });
}

void TpRunner::restart_sampling(SeqId id, const SamplingParams& sampling) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->restart_sampling(id, sampling); });
}

void TpRunner::offload_sequence(SeqId id) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->offload_sequence(id); });
}

void TpRunner::restore_sequence(SeqId id) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->restore_sequence(id); });
}

bool TpRunner::restore_done(SeqId id) {
  // Done when every rank's copy is: a step with the sequence waits on each device anyway.
  check_usable();
  std::vector<char> done(static_cast<size_t>(world_));
  run_all([&](int r) {
    done[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->restore_done(id);
  });
  for (char d : done)
    if (!d) return false;
  return true;
}

std::vector<KvTransfer> TpRunner::completed_transfers() {
  check_usable();
  std::vector<std::vector<KvTransfer>> all(static_cast<size_t>(world_));
  run_all([&](int r) {
    all[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->completed_transfers();
  });
  return std::move(all[0]);
}

void TpRunner::launch(std::span<const StepInput> inputs) {
  check_usable();
  run_all([&](int r) { ranks_[static_cast<size_t>(r)]->launch(inputs); });
}

StepOutput TpRunner::finish() {
  check_usable();
  std::vector<StepOutput> out(static_cast<size_t>(world_));
  run_all([&](int r) { out[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->finish(); });
  return std::move(out[0]);
}

}  // namespace rill::tp
