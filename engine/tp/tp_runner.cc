#include "engine/tp/tp_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "engine/tp/tp_stage.h"

namespace rill::tp {
namespace {

// After a rank failed, how long the others may take to fail alike (the same validation on every
// rank) before the group counts them as waiting for it and aborts.
constexpr std::chrono::seconds kFailureGrace{5};
// After an abort, how long the ranks may take to return before the process ends: a rank that
// does not return then is stuck in the driver, and a silent hang helps nobody.
constexpr std::chrono::seconds kAbortGrace{60};

std::chrono::milliseconds watchdog_from_env() {
  const char* v = std::getenv("RILL_TP_WATCHDOG_S");
  if (!v || !*v) return std::chrono::seconds(600);
  char* end = nullptr;
  const long s = std::strtol(v, &end, 10);
  if (*end != '\0' || s < 0 || s > 86400)
    throw Error(ErrorCode::kInvalidArgument,
                std::string("RILL_TP_WATCHDOG_S: '") + v + "' is not 0 .. 86400 seconds");
  return std::chrono::seconds(s);
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

TpRunner::TpRunner(int world, ModelConfig config, std::shared_ptr<HostCollective> host,
                   std::function<std::unique_ptr<ModelRunner>(int rank)> make_rank,
                   std::function<void()> abort_devices)
    : world_(world),
      config_(std::move(config)),
      host_(std::move(host)),
      abort_devices_(std::move(abort_devices)),
      watchdog_(watchdog_from_env()) {
  if (world < 1)
    throw Error(ErrorCode::kInternal, "tensor-parallel world of " + std::to_string(world));
  ranks_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) workers_.push_back(std::make_unique<Worker>());
  for (int r = 0; r < world; ++r)  // after the vector is complete: work() indexes it
    workers_[static_cast<size_t>(r)]->thread = std::thread([this, r] { work(r); });
  try {
    run_all("construct", [&](int r) { ranks_[static_cast<size_t>(r)] = make_rank(r); });
  } catch (...) {
    broken_ = true;
    try {
      run_all("destroy", [&](int r) { ranks_[static_cast<size_t>(r)].reset(); });
    } catch (...) {
    }
    stop_workers();
    throw;
  }
}

TpRunner::~TpRunner() {
  // Each rank is destroyed on its own thread (a GPU's resources with its device current).
  broken_ = false;
  try {
    run_all("destroy", [&](int r) { ranks_[static_cast<size_t>(r)].reset(); });
  } catch (...) {
  }
  stop_workers();
}

void TpRunner::stop_workers() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
}

void TpRunner::abort_group() {
  if (aborted_.exchange(true)) return;
  if (host_) host_->abort();
  if (abort_devices_) abort_devices_();
}

void TpRunner::work(int rank) {
  Worker& w = *workers_[static_cast<size_t>(rank)];
  bind_stage_slot(rank, &w.stage);
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
      spdlog::log(tracing() ? spdlog::level::warn : spdlog::level::debug,
                  "tensor parallel rank {} failed in {}: {}", rank, w.stage.load(), what_of(error));
    }
    w.stage = "idle";
    lock.lock();
    w.error = error;
    w.busy = false;
    lock.unlock();
    {
      std::lock_guard done(done_mu_);
      ++done_;
      if (error && failed_++ == 0) {
        first_failed_ = rank;
        first_failure_at_ = Clock::now();
      }
    }
    done_cv_.notify_all();
    lock.lock();
  }
}

std::string TpRunner::wait_all(const char* call) {
  std::unique_lock lock(done_mu_);
  const Clock::time_point start = Clock::now();
  Clock::time_point aborted_at{};
  std::string why;
  while (!done_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return done_ == world_; })) {
    const Clock::time_point now = Clock::now();
    if (aborted_at != Clock::time_point{}) {
      if (now - aborted_at > kAbortGrace) {
        spdlog::critical("tensor parallel: {}; the ranks did not return {} s after the abort", why,
                         kAbortGrace.count());
        std::abort();
      }
      continue;
    }
    const auto grace = watchdog_.count() > 0
                           ? std::min<std::chrono::milliseconds>(kFailureGrace, watchdog_)
                           : std::chrono::milliseconds(kFailureGrace);
    const bool late = watchdog_.count() > 0 && now - start > watchdog_;
    // A rank that failed is the cause whenever the watchdog fires too: the grace after a failure
    // is never longer than the watchdog, but started later, so both may come due in one poll.
    const bool diverged = failed_ > 0 && (now - first_failure_at_ > grace || late);
    if (!diverged && !late) continue;
    std::string stages;
    for (int r = 0; r < world_; ++r) {
      Worker& w = *workers_[static_cast<size_t>(r)];
      std::lock_guard busy(w.mu);  // never held with done_mu_ by the worker
      if (w.busy)
        stages += (stages.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " in " +
                  w.stage.load();
    }
    if (late && !diverged)
      why = std::string(call) + " did not finish within " +
            std::to_string(watchdog_.count() / 1000.0) + " s (" + stages + ")";
    spdlog::error("tensor parallel: {}; aborting the group",
                  late && !diverged
                      ? why
                      : std::string(call) + ": rank " + std::to_string(first_failed_) +
                            " failed while others had not finished (" + stages + ")");
    aborted_at = now;
    lock.unlock();
    abort_group();
    lock.lock();
  }
  return why;
}

void TpRunner::run_all(const char* call, const std::function<void(int)>& fn) {
  if (tracing()) spdlog::info("tensor parallel: {} on {} ranks", call, world_);
  {
    std::lock_guard lock(done_mu_);
    done_ = failed_ = 0;
    first_failed_ = -1;
  }
  for (int r = 0; r < world_; ++r) {
    Worker& w = *workers_[static_cast<size_t>(r)];
    std::lock_guard lock(w.mu);
    w.error = nullptr;
    w.stage = call;
    w.job = [&fn, r] { fn(r); };
    w.busy = true;
  }
  for (auto& w : workers_) w->cv.notify_all();
  const std::string late = wait_all(call);
  std::vector<std::exception_ptr> errors;
  for (auto& w : workers_) {
    std::lock_guard lock(w->mu);
    errors.push_back(w->error);
  }
  if (!late.empty()) {
    broken_ = true;
    throw Error(ErrorCode::kInternal,
                "tensor parallel: " + late + "; the group's communicators were aborted");
  }
  int failed = 0, first = -1;
  {
    std::lock_guard lock(done_mu_);
    failed = failed_;
    first = first_failed_;
  }
  if (failed == 0) return;
  if (failed != world_ || aborted_) {
    broken_ = true;
    abort_group();  // the ranks diverged: pending collectives would never match
  }
  std::rethrow_exception(errors[static_cast<size_t>(first)]);
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
  run_all("add_sequence", [&](int r) { ranks_[static_cast<size_t>(r)]->add_sequence(spec); });
}

void TpRunner::remove_sequence(SeqId id) {
  check_usable();
  run_all("remove_sequence", [&](int r) { ranks_[static_cast<size_t>(r)]->remove_sequence(id); });
}

void TpRunner::restart_sampling(SeqId id, const SamplingParams& sampling) {
  check_usable();
  run_all("restart_sampling",
          [&](int r) { ranks_[static_cast<size_t>(r)]->restart_sampling(id, sampling); });
}

void TpRunner::offload_sequence(SeqId id) {
  check_usable();
  run_all("offload_sequence", [&](int r) { ranks_[static_cast<size_t>(r)]->offload_sequence(id); });
}

void TpRunner::restore_sequence(SeqId id) {
  check_usable();
  run_all("restore_sequence", [&](int r) { ranks_[static_cast<size_t>(r)]->restore_sequence(id); });
}

bool TpRunner::restore_done(SeqId id) {
  // Done when every rank's copy is: a step with the sequence waits on each device anyway.
  check_usable();
  std::vector<char> done(static_cast<size_t>(world_));
  run_all("restore_done", [&](int r) {
    done[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->restore_done(id);
  });
  for (char d : done)
    if (!d) return false;
  return true;
}

std::vector<KvTransfer> TpRunner::completed_transfers() {
  check_usable();
  std::vector<std::vector<KvTransfer>> all(static_cast<size_t>(world_));
  run_all("completed_transfers", [&](int r) {
    all[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->completed_transfers();
  });
  return std::move(all[0]);
}

void TpRunner::launch(std::span<const StepInput> inputs) {
  check_usable();
  run_all("launch", [&](int r) { ranks_[static_cast<size_t>(r)]->launch(inputs); });
}

void TpRunner::supply_masks(std::span<const LateMask> masks) {
  check_usable();  // every rank samples (the same gathered logits): each takes the masks
  run_all("supply_masks", [&](int r) { ranks_[static_cast<size_t>(r)]->supply_masks(masks); });
}

StepOutput TpRunner::finish() {
  check_usable();
  std::vector<StepOutput> out(static_cast<size_t>(world_));
  run_all("finish",
          [&](int r) { out[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->finish(); });
  return std::move(out[0]);
}

}  // namespace rill::tp
