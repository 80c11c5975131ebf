// rill-client over gRPC: one server-streaming Generate call with the synchronous stub.
#include <chrono>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "clients/common/grpc_status_name.h"
#include "clients/rill_client/transport.h"
#include "rill/v1/rill.grpc.pb.h"

namespace rill::client {
namespace {

namespace pb = ::rill::v1;

pb::GenerateRequest make_request(const ClientOptions& o, const GenerateInput& input) {
  pb::GenerateRequest req;
  if (input.messages) {
    for (const ChatMessage& m : *input.messages) {
      pb::ChatMessage* out = req.mutable_messages()->add_messages();
      out->set_role(m.role);
      out->set_content(m.content);
    }
  } else {
    req.set_text(*input.prompt);
  }
  pb::SamplingParameters* s = req.mutable_sampling();
  if (o.temperature) s->set_temperature(static_cast<float>(*o.temperature));
  if (o.top_k) s->set_top_k(*o.top_k);
  if (o.top_p) s->set_top_p(static_cast<float>(*o.top_p));
  if (o.min_p) s->set_min_p(static_cast<float>(*o.min_p));
  if (o.repetition_penalty) s->set_repetition_penalty(static_cast<float>(*o.repetition_penalty));
  if (o.presence_penalty) s->set_presence_penalty(static_cast<float>(*o.presence_penalty));
  if (o.frequency_penalty) s->set_frequency_penalty(static_cast<float>(*o.frequency_penalty));
  if (o.seed) s->set_seed(*o.seed);
  for (const std::string& stop : o.stop) req.add_stop(stop);
  if (o.max_tokens) {
    // Out of int32's range: pass a value the server refuses rather than a wrapped one.
    const int64_t v = *o.max_tokens;
    req.set_max_tokens(v > INT32_MAX ? INT32_MAX
                                     : (v < INT32_MIN ? INT32_MIN : static_cast<int32_t>(v)));
  }
  req.set_ignore_eos(o.ignore_eos);
  if (o.cache) {
    pb::CachePolicy* c = req.mutable_cache();
    c->set_kind(*o.cache == "streaming" ? pb::CachePolicy::KIND_STREAMING
                                        : pb::CachePolicy::KIND_FULL);
    c->set_n_sink(o.sink);
    c->set_window(o.window);
  }
  if (o.priority) req.set_priority(*o.priority);
  return req;
}

// Maps a failed call's status to the exit code and message.
[[noreturn]] void throw_status(const ClientOptions& o, const grpc::Status& status,
                               const grpc::ClientContext& ctx, grpc::Channel& channel,
                               bool got_response) {
  const std::string details = status.error_message();
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    std::string retry = "unknown";
    const auto& trailers = ctx.GetServerTrailingMetadata();
    if (auto it = trailers.find("retry-after-ms"); it != trailers.end())
      retry = std::string(it->second.data(), it->second.size()) + " ms";
    throw ClientError(ExitCode::kOverloaded, "server overloaded (RESOURCE_EXHAUSTED: " + details +
                                                 "); retry after " + retry);
  }
  // UNAVAILABLE before any response on a channel that never connected: the server is not
  // there. (The server's own UNAVAILABLE, loading or draining, comes over a ready channel.)
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !got_response &&
      channel.GetState(false) != GRPC_CHANNEL_READY)
    throw ClientError(ExitCode::kUnreachable, "cannot reach " + o.target + ": " + details);
  throw ClientError(ExitCode::kServerError,
                    "server error " + grpc_status_name(status.error_code()) + ": " + details);
}

}  // namespace

Generation grpc_generate(const ClientOptions& o, const GenerateInput& input,
                         const ChunkCallback& on_chunk) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials());
  std::unique_ptr<pb::Rill::Stub> stub = pb::Rill::NewStub(channel);
  grpc::ClientContext ctx;
  if (o.timeout_s > 0)
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         std::chrono::duration<double>(o.timeout_s)));

  const pb::GenerateRequest req = make_request(o, input);
  std::unique_ptr<grpc::ClientReader<pb::GenerateResponse>> reader = stub->Generate(&ctx, req);
  Generation g;
  pb::GenerateResponse msg;
  bool got_response = false;
  while (reader->Read(&msg)) {
    got_response = true;
    if (msg.token_ids_size() > 0 || !msg.text().empty()) {
      g.text += msg.text();
      g.token_ids.insert(g.token_ids.end(), msg.token_ids().begin(), msg.token_ids().end());
      on_chunk(msg.text());
    }
    if (msg.has_final()) {
      const pb::FinalInfo& f = msg.final();
      g.finish_reason = f.finish_reason();
      g.prompt_tokens = f.usage().prompt_tokens();
      g.completion_tokens = f.usage().completion_tokens();
      g.server_timings = ServerTimings{f.timings().queue_s(), f.timings().ttft_s(),
                                       f.timings().tpot_s(), f.timings().e2e_s()};
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) throw_status(o, status, ctx, *channel, got_response);
  return g;
}

}  // namespace rill::client
