#include "server/grpc_service.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "engine/serving/request.h"
#include "engine/serving/ids.h"
#include "rill/v1/rill.grpc.pb.h"
#include "server/error_mapping.h"
#include "server/grpc_convert.h"
#include "server/grpc_request.h"
#include "server/grpc_request_id.h"
#include "server/grpc_session.h"
#include "server/grpc_constraint.h"
#include "server/grpc_tools.h"
#include "server/reactor_link.h"
#include "server/session_turn.h"
#include "server/wake_queue.h"

namespace rill::server {
namespace {

std::vector<int32_t> chat_prompt(ServingContext& ctx, const pb::ChatMessages& in,
                                 const toolcall::ToolSpec& tools) {
  const nlohmann::ordered_json tools_json = tools.tools.empty()
                                                ? nlohmann::ordered_json(nullptr)
                                                : toolcall::tools_template_json(tools.tools);
  const std::string text =
      ctx.chat().render(chat_messages_json(in), /*add_generation_prompt=*/true, tools_json);
  return ctx.encode_prompt(text, ctx.chat().has_special_tokens());
}

}  // namespace

// rill.v1.GenerateRequest -> rill::Request. Throws rill::Error on bad input.
Request to_request(ServingContext& ctx, const pb::GenerateRequest& in,
                   grpc::CallbackServerContext* call) {
  Request r;
  const toolcall::ToolSpec tools = tool_spec_from_pb(in.tool_options());
  if (in.has_tool_options() && in.input_case() != pb::GenerateRequest::kMessages)
    throw FieldError("tool_options", "'tool_options' needs the input 'messages'");
  r.id = in.request_id().empty() ? ctx.new_request_id("grpc-") : in.request_id();
  r.id_scope = request_id_scope(in.request_id(), *call);
  switch (in.input_case()) {
    case pb::GenerateRequest::kText:
      r.prompt = ctx.encode_prompt(in.text());
      break;
    case pb::GenerateRequest::kTokenIds:
      r.prompt.assign(in.token_ids().ids().begin(), in.token_ids().ids().end());
      break;
    case pb::GenerateRequest::kMessages:
      r.prompt = chat_prompt(ctx, in.messages(), tools);
      break;
    default:
      throw Error(ErrorCode::kInvalidArgument, "one of text, token_ids or messages is required");
  }
  ctx.check_prompt(r.prompt, "input");
  r.sampling = ctx.model().sampling_defaults;
  apply_sampling(in.sampling(), r.sampling);
  apply_generation_fields(in, r, ctx.model().vocab_size);
  apply_constraint_fields(in, tools, ctx.model().tool_family, ctx.require_engine(), r);
  // Call markers are special tokens in some families: kept in the text the parser reads.
  if (tools.active() && ctx.model().tool_family != toolcall::ToolFamily::kNone)
    r.skip_special_tokens = false;
  r.cache = from_pb(in.cache());
  r.priority = in.priority();
  const auto now = Clock::now();
  if (in.deadline_ms() > 0)
    r.deadline = deadline_after(now, std::chrono::milliseconds(in.deadline_ms()));
  // The call's own deadline, moved onto the steady clock (none: system_clock's maximum, which
  // the subtraction below would wrap).
  const auto call_deadline = call->deadline();
  if (call_deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    const auto left = call_deadline - std::chrono::system_clock::now();
    const auto d = deadline_after(now, std::chrono::duration_cast<std::chrono::milliseconds>(left));
    if (!r.deadline || d < *r.deadline) r.deadline = d;
  }
  return r;
}

namespace {

// One Generate stream. States: submitted -> (writes, one in flight) -> final written ->
// Finish -> OnDone (deletes). The engine's notifier only posts a wake-up to the WakeQueue; the
// wake-up and OnWriteDone pump events under mu_.
class GenerateReactor final : public grpc::ServerWriteReactor<pb::GenerateResponse>,
                              public Pumped {
 public:
  GenerateReactor(ServingContext& ctx, const std::shared_ptr<WakeQueue>& wakes,
                  grpc::CallbackServerContext* call, const pb::GenerateRequest* in)
      : ctx_(ctx), call_(call), link_(std::make_shared<ReactorLink>(this)) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      ServingEngine& engine = ctx.require_engine();
      engine_ = &engine;
      Request req = to_request(ctx, *in, call);
      tool_calls_ = StreamToolCalls(ctx.model().tool_family, tool_spec_from_pb(in->tool_options()));
      request_id_ = req.id;
      prompt_tokens_ = static_cast<int>(req.prompt.size());
      handle_ = engine.submit(std::move(req), ReactorLink::notifier(link_, wakes));
    } catch (const std::exception& e) {
      const ErrorReply err = map_exception(e);
      status_code_ = err.grpc_code;
      spdlog::debug("grpc Generate refused: {}", err.message);
      finish_locked(to_status(call, err));
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client went away or cancelled
      handle_.cancel();
      status_code_ = grpc::StatusCode::CANCELLED;
      finish_locked(grpc::Status::CANCELLED);
      return;
    }
    if (final_written_) {
      finish_locked(final_status_);
      return;
    }
    pump_locked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_.valid()) handle_.cancel();
    status_code_ = grpc::StatusCode::CANCELLED;
    if (!writing_) finish_locked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    link_->detach();
    AccessRecord rec{
        "grpc",         "Generate",     request_id_,        static_cast<int>(status_code_),
        finish_reason_, prompt_tokens_, completion_tokens_, timings_};
    ctx_.access_log(rec);
    delete this;  // the handle cancels the request if it had not finished
  }

  void pump() override {
    std::lock_guard<std::mutex> lock(mu_);
    pump_locked();
  }

 private:

  void finish_locked(const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    Finish(status);
  }

  // Takes every ready event and starts one write carrying them (tokens, and the final
  // information when the stream ended).
  void pump_locked() {
    if (writing_ || finish_called_ || !handle_.valid()) return;
    events_.clear();
    handle_.poll(events_);
    if (events_.empty()) return;
    msg_.Clear();
    if (!sent_first_) msg_.set_request_id(request_id_);
    const Tokenizer& tok = engine_->tokenizer();
    bool has_tokens = false;
    for (const RequestEvent& ev : events_) {
      if (const auto* c = std::get_if<TokenChunk>(&ev)) {
        append_chunk(msg_, tool_calls_.on_chunk(msg_, *c), tok);
        has_tokens |= !c->ids.empty() || !c->text.empty();
        continue;
      }
      const FinalEvent& f = std::get<FinalEvent>(ev);
      finish_reason_ = finish_reason_name(f.reason);
      if (tool_calls_.on_final(msg_) && f.reason == FinishReason::kStop)
        finish_reason_ = "tool_calls";
      completion_tokens_ = f.usage.completion_tokens;
      timings_ = f.timings;
      final_written_ = true;
      if (f.reason == FinishReason::kError) {
        const ErrorReply err = map_error(f.error_code, f.error_message);
        status_code_ = err.grpc_code;
        final_status_ = to_status(call_, err);
      } else {
        fill_final(*msg_.mutable_final(), f);
        msg_.mutable_final()->set_finish_reason(finish_reason_);
        final_status_ = grpc::Status::OK;
        status_code_ = grpc::StatusCode::OK;
        has_tokens = true;
      }
    }
    if (!has_tokens) {  // an error with nothing left to send
      if (final_written_) finish_locked(final_status_);
      return;
    }
    sent_first_ = true;
    writing_ = true;
    StartWrite(&msg_);
  }

  ServingContext& ctx_;
  grpc::CallbackServerContext* call_;
  std::shared_ptr<ReactorLink> link_;
  const ServingEngine* engine_ = nullptr;  // set when submitted; outlives the stream
  std::mutex mu_;
  RequestHandle handle_;
  std::vector<RequestEvent> events_;
  pb::GenerateResponse msg_;    // the write in flight
  StreamToolCalls tool_calls_;  // the reply parsed into content and calls (with tools)
  bool writing_ = false, final_written_ = false, finish_called_ = false, sent_first_ = false;
  grpc::Status final_status_;
  // For the access log.
  std::string request_id_, finish_reason_;
  grpc::StatusCode status_code_ = grpc::StatusCode::OK;
  int prompt_tokens_ = 0, completion_tokens_ = 0;
  RequestTimings timings_;
};

class RillService final : public pb::Rill::CallbackService {
 public:
  RillService(ServingContext& ctx, std::shared_ptr<WakeQueue> wakes)
      : ctx_(ctx), wakes_(std::move(wakes)) {}

  grpc::ServerWriteReactor<pb::GenerateResponse>* Generate(grpc::CallbackServerContext* call,
                                                           const pb::GenerateRequest* in) override {
    return new GenerateReactor(ctx_, wakes_, call, in);
  }

  grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* Session(
      grpc::CallbackServerContext* call) override {
    return start_session_call(ctx_, wakes_, call);
  }

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* call,
                                          const pb::SessionOptions* in,
                                          pb::SessionInfo* out) override {
    return unary(call, [&] {
      fill_session_info(*out, create_session(ctx_, from_pb(*in, ctx_.model().sampling_defaults)));
    });
  }

  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* call,
                                       const pb::GetSessionRequest* in,
                                       pb::SessionInfo* out) override {
    return unary(call, [&] { fill_session_info(*out, get_session(ctx_, in->session_id())); });
  }

  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* call,
                                          const pb::DeleteSessionRequest* in,
                                          pb::DeleteSessionResponse* out) override {
    return unary(call, [&] { out->set_found(delete_session(ctx_, in->session_id())); });
  }

  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* call, const pb::CancelRequest* in,
                                   pb::CancelResponse* out) override {
    // Finds the caller's own client-given ids, and server-assigned ids from anyone who holds
    // one (grpc_request_id.h).
    return unary(call, [&] {
      check_id_length(in->request_id(), "'request_id'");
      out->set_found(ctx_.require_engine().cancel(in->request_id(), caller_scope(*call)));
    });
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const pb::TokenizeRequest* in,
                                     pb::TokenizeResponse* out) override {
    return unary(call, [&] {
      for (int32_t id :
           ctx_.require_engine().tokenizer().encode(in->text(), in->add_special_tokens()))
        out->add_token_ids(id);
    });
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const pb::DetokenizeRequest* in,
                                       pb::DetokenizeResponse* out) override {
    return unary(call, [&] {
      const Tokenizer& tok = ctx_.require_engine().tokenizer();
      const std::vector<int32_t> ids(in->token_ids().begin(), in->token_ids().end());
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size())
          throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) +
                                                       " is out of range [0, " +
                                                       std::to_string(tok.vocab_size()) + ")");
      out->set_text(tok.decode(ids, in->skip_special_tokens()));
    });
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const pb::GetModelInfoRequest*,
                                         pb::GetModelInfoResponse* out) override {
    return unary(call, [&] {
      const ServingEngine& e = ctx_.require_engine();
      const ModelInfo& m = ctx_.model();
      out->set_model_name(m.served_name);
      out->set_architecture(m.architecture);
      out->set_context_length(m.context_length);
      out->set_dtype(m.dtype);
      out->set_quantization(m.quantization);
      out->set_vocab_size(m.vocab_size);
      out->set_max_sink(e.config().max_sink);
      out->set_max_window(e.config().max_window);
      out->set_max_top_logprobs(kMaxTopLogprobs);
      for (int id : m.eos_token_ids) out->add_eos_token_ids(id);
    });
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* call,
                                          const pb::GetServerInfoRequest*,
                                          pb::GetServerInfoResponse* out) override {
    return unary(call, [&] {
      const ServingEngine& e = ctx_.require_engine();
      out->set_version(kRillVersion);
      out->set_runner(e.runner_name());
      out->set_kv_block_size(e.kv_block_size());
      out->set_kv_blocks_total(e.kv_blocks_total());
      out->set_max_running(e.config().max_num_seqs);
      out->set_max_batched_tokens(e.config().max_num_batched_tokens);
      out->set_max_queued_requests(e.config().max_queued_requests);
      out->set_prefix_caching(e.config().enable_prefix_caching);
      out->set_prefix_cache_hit_rate(e.stats().prefix_cache_hit_rate);
      out->set_tensor_parallel_size(ctx_.model().tensor_parallel_size);
    });
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* call, const pb::GetLoadRequest*,
                                    pb::GetLoadResponse* out) override {
    return unary(call, [&] {
      const ServingEngine* e = ctx_.engine();
      if (!e) throw Error(ErrorCode::kUnavailable, "the model is loading");
      const EngineStats s = e->stats();
      out->set_running(s.running);
      out->set_waiting(s.waiting);
      out->set_kv_blocks_used(s.kv_blocks_used);
      out->set_kv_blocks_total(s.kv_blocks_total);
      out->set_kv_usage(s.kv_usage);
      out->set_draining(s.draining || ctx_.draining());
      out->set_stalled(s.stalled);
      out->set_prefix_cache_hit_rate(s.prefix_cache_hit_rate);
      out->set_prefix_cache_queries(s.prefix_cache_queries);
      out->set_prefix_cache_hits(s.prefix_cache_hits);
      out->set_kv_blocks_cached(s.kv_blocks_cached);
    });
  }

 private:
  // Runs `body` (quick, non-blocking) and finishes with OK or the mapped error.
  template <typename F>
  grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* call, F&& body) {
    grpc::ServerUnaryReactor* r = call->DefaultReactor();
    try {
      body();
      r->Finish(grpc::Status::OK);
    } catch (const std::exception& e) {
      r->Finish(to_status(call, map_exception(e)));
    }
    return r;
  }

  ServingContext& ctx_;
  std::shared_ptr<WakeQueue> wakes_;
};

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(ServingContext& ctx, const std::string& host, int port)
      : ctx_(ctx), wakes_(std::make_shared<WakeQueue>()), service_(ctx, wakes_) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder b;
    const std::string addr = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                             std::to_string(port);
    b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    b.SetMaxReceiveMessageSize(static_cast<int>(ctx.config().max_body_bytes));
    // Keepalive: accept clients that ping every 30 s (even between calls), ping idle clients
    // every 60 s and drop those that do not answer in 20 s.
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
    b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    server_ = b.BuildAndStart();
    if (!server_ || port_ == 0)
      throw Error(ErrorCode::kUnavailable, "gRPC: cannot listen on " + addr);
    update_health();
  }

  void update_health() {
    if (!server_) return;
    auto* h = server_->GetHealthCheckService();
    if (!h) return;
    const bool serving = ctx_.unhealthy_reason().empty();
    h->SetServingStatus(serving);
    h->SetServingStatus("rill.v1.Rill", serving);
  }

  void shutdown(double deadline_s) {
    if (!server_) return;
    update_health();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1e3)));
  }

  int port_ = 0;
  ServingContext& ctx_;
  std::shared_ptr<WakeQueue> wakes_;  // shared with the engine's notifiers
  RillService service_;
  std::unique_ptr<grpc::Server> server_;
};

GrpcServer::GrpcServer(ServingContext& ctx, const std::string& host, int port)
    : impl_(std::make_unique<Impl>(ctx, host, port)) {}
GrpcServer::~GrpcServer() {
  if (impl_->server_) {
    impl_->server_->Shutdown(std::chrono::system_clock::now());  // cancels what is left
    impl_->server_->Wait();
  }
  impl_->wakes_->stop();  // notifiers that fire later find it stopped
}
int GrpcServer::port() const {
  return impl_->port_;
}
void GrpcServer::update_health() {
  impl_->update_health();
}
void GrpcServer::shutdown(double deadline_s) {
  impl_->shutdown(deadline_s);
}

}  // namespace rill::server
