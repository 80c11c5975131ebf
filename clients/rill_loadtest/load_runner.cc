#include "clients/rill_loadtest/load_runner.h"

#include <cmath>
#include <memory>
#include <optional>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace rill::loadtest {
namespace {

namespace asio = boost::asio;

// The state of one phase; every member function runs on the phase's event-loop thread.
class Phase {
 public:
  Phase(StreamClient& client, Workload& workload, Clock::time_point epoch, const LoadPlan& plan,
        const std::function<void(const PhaseProgress&)>& on_progress)
      : client_(client),
        workload_(workload),
        epoch_(epoch),
        plan_(plan),
        on_progress_(on_progress),
        work_(asio::make_work_guard(io_)),
        arrival_timer_(io_),
        tick_timer_(io_) {
    const int turns = std::max(1, workload.config().turns);
    if (plan.num_requests > 0) max_conversations_ = (plan.num_requests + turns - 1) / turns;
  }

  PhaseResult run() {
    asio::post(io_, [this] { begin(); });
    io_.run();
    result_.end_s = result_.records.empty() ? seconds_since(epoch_) : last_end_;
    return std::move(result_);
  }

 private:
  void begin() {
    start_ = Clock::now();
    result_.start_s = seconds_since(epoch_);
    if (plan_.closed_loop) {
      add_slots();
    } else {
      schedule_ = std::make_unique<ArrivalSchedule>(plan_.arrivals, plan_.seed);
      schedule_arrival();
    }
    tick();
    maybe_finish();  // a phase may have nothing to send (the first arrival past the duration)
  }

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  bool may_start() const {
    if (max_conversations_ && result_.conversations >= *max_conversations_) return false;
    return plan_.duration_s <= 0 || elapsed() < plan_.duration_s;
  }

  // Closed loop: bring the number of slots up to its ramp target; re-armed while ramping.
  void add_slots() {
    int target = plan_.concurrency;
    if (plan_.ramp_up_s > 0 && elapsed() < plan_.ramp_up_s)
      target =
          std::max(1, static_cast<int>(std::ceil(plan_.concurrency * elapsed() / plan_.ramp_up_s)));
    while (slots_ < target && may_start()) {
      ++slots_;
      start_conversation();
    }
    if (slots_ < plan_.concurrency && may_start()) {
      ramp_pending_ = true;
      arrival_timer_.expires_after(std::chrono::milliseconds(20));
      arrival_timer_.async_wait([this](const boost::system::error_code& ec) {
        ramp_pending_ = false;
        if (!ec) add_slots();
        maybe_finish();
      });
    }
  }

  // Open loop: wait for the next arrival time, start a conversation, repeat.
  void schedule_arrival() {
    if (!may_start()) return;
    const double at = schedule_->next();
    if (plan_.duration_s > 0 && at >= plan_.duration_s) return;
    arrival_pending_ = true;
    arrival_timer_.expires_at(
        start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
    arrival_timer_.async_wait([this](const boost::system::error_code& ec) {
      arrival_pending_ = false;
      if (!ec && may_start()) {
        start_conversation();
        schedule_arrival();
      }
      maybe_finish();
    });
  }

  void start_conversation() {
    const int64_t conversation = result_.conversations++;
    send(workload_.first_turn(), conversation, 0);
  }

  void send(const RequestSpec& spec, int64_t conversation, int turn) {
    RequestRecord record;
    record.id = next_id_++;
    record.conversation = conversation;
    record.turn = turn;
    record.group = spec.group;
    record.warmup = plan_.warmup;
    ++in_flight_;
    auto shared_spec = std::make_shared<RequestSpec>(spec);
    client_.start(spec, std::move(record), [this, shared_spec](RequestRecord&& r) {
      asio::post(io_, [this, shared_spec, r = std::move(r)]() mutable {
        on_done(*shared_spec, std::move(r));
      });
    });
  }

  void on_done(const RequestSpec& spec, RequestRecord&& r) {
    --in_flight_;
    last_end_ = std::max(last_end_, r.end_s);
    if (!r.error.empty()) ++errors_;
    const bool more_turns = r.ok() && r.turn + 1 < workload_.config().turns &&
                            (plan_.duration_s <= 0 || elapsed() < plan_.duration_s);
    const int64_t conversation = r.conversation;
    const int turn = r.turn;
    const std::string answer = std::move(r.text);
    r.text.clear();
    result_.records.push_back(std::move(r));
    if (more_turns) {
      send(workload_.next_turn(spec, answer), conversation, turn + 1);
    } else if (plan_.closed_loop && may_start()) {
      start_conversation();  // the same slot goes on
    }
    maybe_finish();
  }

  void tick() {
    report_progress();
    tick_timer_.expires_after(std::chrono::milliseconds(200));
    tick_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) tick();
    });
  }

  void report_progress() {
    if (!on_progress_) return;
    PhaseProgress p;
    p.elapsed_s = elapsed();
    p.finished = static_cast<int64_t>(result_.records.size());
    p.in_flight = in_flight_;
    p.errors = errors_;
    p.target = plan_.num_requests;
    on_progress_(p);
  }

  void maybe_finish() {
    if (in_flight_ > 0 || arrival_pending_ || ramp_pending_) return;
    report_progress();
    tick_timer_.cancel();
    arrival_timer_.cancel();
    work_.reset();
  }

  StreamClient& client_;
  Workload& workload_;
  Clock::time_point epoch_;
  const LoadPlan& plan_;
  const std::function<void(const PhaseProgress&)>& on_progress_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::steady_timer arrival_timer_, tick_timer_;
  std::unique_ptr<ArrivalSchedule> schedule_;
  std::optional<int64_t> max_conversations_;
  Clock::time_point start_;
  PhaseResult result_;
  int64_t next_id_ = 0, in_flight_ = 0, errors_ = 0;
  int slots_ = 0;
  bool arrival_pending_ = false, ramp_pending_ = false;
  double last_end_ = 0;
};

}  // namespace

PhaseResult LoadRunner::run(const LoadPlan& plan,
                            const std::function<void(const PhaseProgress&)>& on_progress) {
  Phase phase(client_, workload_, epoch_, plan, on_progress);
  return phase.run();
}

}  // namespace rill::loadtest
