// rill-loadtest over gRPC: rill.v1.Rill/Generate through the callback API. One
// ClientReadReactor per call with one read in flight; calls are spread over a few channels
// (separate HTTP/2 connections). gRPC's own threads run the reactions, none blocks.
#include <atomic>
#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clients/common/grpc_status_name.h"
#include "clients/rill_loadtest/stream_client.h"
#include "rill/v1/rill.grpc.pb.h"

namespace rill::loadtest {
namespace {

namespace pb = ::rill::v1;

pb::GenerateRequest make_request(const RequestSpec& spec) {
  pb::GenerateRequest req;
  if (spec.chat) {
    for (const ChatMessage& m : spec.messages) {
      pb::ChatMessage* out = req.mutable_messages()->add_messages();
      out->set_role(m.role);
      out->set_content(m.content);
    }
  } else if (!spec.prompt_ids.empty()) {
    req.mutable_token_ids()->mutable_ids()->Assign(spec.prompt_ids.begin(), spec.prompt_ids.end());
  } else {
    req.set_text(spec.prompt_text);
  }
  req.set_max_tokens(spec.max_tokens);
  req.set_ignore_eos(spec.ignore_eos);
  if (spec.temperature)
    req.mutable_sampling()->set_temperature(static_cast<float>(*spec.temperature));
  if (!spec.cache.empty()) {
    pb::CachePolicy* c = req.mutable_cache();
    c->set_kind(spec.cache == "streaming" ? pb::CachePolicy::KIND_STREAMING
                                          : pb::CachePolicy::KIND_FULL);
    c->set_n_sink(spec.sink);
    c->set_window(spec.window);
  }
  if (spec.ttft_target_ms) req.set_ttft_target_ms(static_cast<uint32_t>(*spec.ttft_target_ms));
  if (spec.tpot_target_ms) req.set_tpot_target_ms(static_cast<uint32_t>(*spec.tpot_target_ms));
  return req;
}

// One Generate call; deletes itself in OnDone, after handing its record over.
class GenerateCall final : public grpc::ClientReadReactor<pb::GenerateResponse> {
 public:
  GenerateCall(const TransportOptions& options, Clock::time_point epoch, const RequestSpec& spec,
               RequestRecord record, DoneCallback done)
      : epoch_(epoch),
        request_(make_request(spec)),
        record_(std::move(record)),
        done_(std::move(done)),
        cancel_after_(spec.cancel_after_tokens),
        control_(spec.control),
        keep_text_(spec.keep_text) {
    if (options.timeout_s > 0)
      context_.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                std::chrono::duration<double>(options.timeout_s)));
  }

  void start(pb::Rill::Stub& stub) {
    record_.start_s = seconds_since(epoch_);
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows
    const double now = seconds_since(epoch_);
    if (response_.token_ids_size() > 0) {
      record_.chunk_times_s.push_back(now);
      record_.chunk_tokens.push_back(response_.token_ids_size());
      if (keep_text_) record_.text += response_.text();
      if (control_) control_->started.store(true);
    }
    if (response_.has_final()) {
      const pb::FinalInfo& f = response_.final();
      record_.finish_reason = f.finish_reason();
      record_.prompt_tokens = f.usage().prompt_tokens();
      record_.output_tokens = f.usage().completion_tokens();
      record_.cached_tokens = f.usage().cached_tokens();
      record_.usage_seen = true;
    }
    // A request whose final message arrived has finished: nothing left to cancel.
    const bool stop = (cancel_after_ > 0 && record_.tokens_received() >= cancel_after_) ||
                      (control_ && control_->stop.load());
    if (stop && !record_.cancelled && !response_.has_final()) {
      record_.cancelled = true;
      context_.TryCancel();  // the server cancels the request; OnDone sees CANCELLED
      return;
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.end_s = seconds_since(epoch_);
    if (!status.ok() && !record_.cancelled) {
      record_.error = "grpc " + rill::client::grpc_status_name(status.error_code());
      record_.error_message = status.error_message();
    } else if (status.ok() && !record_.usage_seen) {
      record_.error = "no final message";
    }
    if (!record_.usage_seen) record_.output_tokens = record_.tokens_received();
    done_(std::move(record_));
    delete this;
  }

 private:
  grpc::ClientContext context_;
  Clock::time_point epoch_;
  pb::GenerateRequest request_;
  pb::GenerateResponse response_;
  RequestRecord record_;
  DoneCallback done_;
  int cancel_after_;
  std::shared_ptr<StreamControl> control_;
  bool keep_text_;
};

class GrpcStreamClient final : public StreamClient {
 public:
  GrpcStreamClient(const TransportOptions& options, Clock::time_point epoch)
      : options_(options), epoch_(epoch) {
    for (int i = 0; i < std::max(1, options.channels); ++i) {
      grpc::ChannelArguments args;
      // Distinct arguments and a local subchannel pool: each channel gets its own connection.
      args.SetInt("rill.loadtest.channel", i);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetMaxReceiveMessageSize(-1);
      stubs_.push_back(pb::Rill::NewStub(
          grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args)));
    }
  }

  void start(const RequestSpec& spec, RequestRecord record, DoneCallback done) override {
    pb::Rill::Stub& stub = *stubs_[next_++ % stubs_.size()];
    (new GenerateCall(options_, epoch_, spec, std::move(record), std::move(done)))->start(stub);
  }

 private:
  TransportOptions options_;
  Clock::time_point epoch_;
  std::vector<std::unique_ptr<pb::Rill::Stub>> stubs_;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::unique_ptr<StreamClient> make_grpc_client(const TransportOptions& options,
                                               Clock::time_point epoch) {
  return std::make_unique<GrpcStreamClient>(options, epoch);
}

}  // namespace rill::loadtest
