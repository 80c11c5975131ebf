#include "server/grpc_session.h"

#include <deque>
#include <mutex>
#include <optional>

#include <spdlog/spdlog.h>

#include "server/error_mapping.h"
#include "server/grpc_constraint.h"
#include "server/grpc_convert.h"
#include "server/grpc_request_id.h"
#include "server/grpc_tools.h"
#include "server/reactor_link.h"
#include "server/session_turn.h"

namespace rill::server {
namespace {

// rill.v1.SessionTurn's input -> TurnInput. Throws kInvalidArgument when it has none.
TurnInput turn_input(const pb::SessionTurn& t) {
  TurnInput in;
  switch (t.input_case()) {
    case pb::SessionTurn::kText:
      in.text = t.text();
      break;
    case pb::SessionTurn::kTokenIds:
      in.kind = TurnInput::Kind::kTokens;
      in.ids.assign(t.token_ids().ids().begin(), t.token_ids().ids().end());
      break;
    case pb::SessionTurn::kMessages:
      in.kind = TurnInput::Kind::kChat;
      in.messages = chat_messages_json(t.messages());
      if (const auto spec = tool_spec_from_pb(t.tool_options()); !spec.tools.empty())
        in.tools = toolcall::tools_template_json(spec.tools);
      break;
    default:
      throw Error(ErrorCode::kInvalidArgument, "one of text, token_ids or messages is required");
  }
  if (t.has_tool_options() && in.kind != TurnInput::Kind::kChat)
    throw FieldError("tool_options", "'tool_options' needs the input 'messages'");
  return in;
}

// States: reading open -> opened -> turns (one at a time: submitted, tokens written, final
// written) -> the client's WritesDone or cancel -> Finish -> OnDone (closes an owned session,
// deletes). One read and one write in flight at most; control messages (opened, turn errors)
// wait in out_, and reading pauses while any wait, so a client sending turns in a burst is
// answered one error at a time instead of growing a queue. The engine's notifier only posts a
// wake-up to the WakeQueue; wake-ups and reactions run under mu_ and never block.
class SessionReactor final
    : public grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>,
      public Pumped {
 public:
  SessionReactor(ServingContext& ctx, std::shared_ptr<WakeQueue> wakes,
                 grpc::CallbackServerContext* call)
      : ctx_(ctx), wakes_(std::move(wakes)), call_(call), link_(std::make_shared<ReactorLink>(this)) {
    std::lock_guard<std::mutex> lock(mu_);
    read_more_locked();
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    reading_ = false;
    if (!ok) {  // WritesDone (or the call ended): finish once the running turn is written
      reads_done_ = true;
    } else if (session_id_.empty()) {
      open_locked();
    } else {
      turn_locked();
    }
    read_more_locked();
    pump_locked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client went away
      if (turn_) turn_->handle.cancel();
      return finish_locked(grpc::Status::CANCELLED);
    }
    if (turn_ && turn_->final_written) turn_.reset();  // the next turn is welcome now
    read_more_locked();
    pump_locked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (turn_) turn_->handle.cancel();
    if (!writing_) finish_locked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    link_->detach();
    if (owned_) close_owned_session();  // finish_locked closed it already on every usual path
    delete this;                        // a running turn's handle cancels it
  }

  void pump() override {
    std::lock_guard<std::mutex> lock(mu_);
    pump_locked();
  }

 private:

  struct Turn {
    TurnPlan plan;
    RequestHandle handle;
    std::string request_id, text;
    bool final_written = false;  // ended: its final message is queued or being written
    StreamToolCalls tool_calls;  // the reply parsed into content and calls (with tools)
  };

  void open_locked() {
    if (in_.kind_case() != pb::SessionRequest::kOpen)
      return finish_locked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                        "the first message of a Session call must be open"));
    try {
      const pb::SessionOpen& open = in_.open();
      SessionInfo info;
      if (open.has_create()) {
        info = create_session(ctx_, from_pb(open.create(), ctx_.model().sampling_defaults));
        owned_ = true;
      } else if (!open.attach_session_id().empty()) {
        info = get_session(ctx_, open.attach_session_id());
      } else {
        throw Error(ErrorCode::kInvalidArgument, "open needs create or attach_session_id");
      }
      session_id_ = info.options.id;
      incarnation_ = info.incarnation;
      pb::SessionResponse m;
      fill_session_info(*m.mutable_opened(), info);
      out_.push_back(std::move(m));
    } catch (const std::exception& e) {
      finish_locked(to_status(call_, map_exception(e)));
    }
  }

  void turn_locked() {
    if (in_.kind_case() != pb::SessionRequest::kTurn)
      return turn_error_locked(
          "", map_error(ErrorCode::kInvalidArgument, "the session is open: send turns"));
    const pb::SessionTurn& t = in_.turn();
    const std::string id = t.request_id().empty() ? ctx_.new_request_id("grpc-") : t.request_id();
    // A turn whose final message is queued or in flight is over: the client may have that
    // message before OnWriteDone runs here.
    if (turn_ && turn_->final_written) turn_.reset();
    if (turn_)
      return turn_error_locked(id, map_error(ErrorCode::kFailedPrecondition,
                                             "a turn of session " + session_id_ +
                                                 " is running: send the next one after its final "
                                                 "message"));
    try {
      // Only the session this call opened: not a later one that took its id.
      TurnPlan plan = plan_session_turn(ctx_, session_id_, turn_input(t), incarnation_);
      Request r = session_request(plan);
      r.id = id;
      r.id_scope = request_id_scope(t.request_id(), *call_);
      apply_sampling(t.sampling(), r.sampling);
      apply_generation_fields(t, r, ctx_.model().vocab_size);
      const toolcall::ToolSpec tools = tool_spec_from_pb(t.tool_options());
      apply_constraint_fields(t, tools, ctx_.model().tool_family, ctx_.require_engine(), r);
      if (tools.active() && ctx_.model().tool_family != toolcall::ToolFamily::kNone)
        r.skip_special_tokens = false;  // call markers may be special tokens
      ctx_.check_prompt(r.prompt, "input");
      tokenizer_ = &ctx_.require_engine().tokenizer();
      RequestHandle handle = submit_session_turn(ctx_, std::move(r), ReactorLink::notifier(link_, wakes_));
      turn_.emplace(Turn{std::move(plan),
                         std::move(handle),
                         id,
                         {},
                         false,
                         StreamToolCalls(ctx_.model().tool_family, tools)});
    } catch (const std::exception& e) {
      const ErrorReply err = map_exception(e);
      if (err.grpc_code == grpc::StatusCode::NOT_FOUND)  // the session is gone: so is the call
        return finish_locked(to_status(call_, err));
      turn_error_locked(id, err);
    }
  }

  void turn_error_locked(const std::string& request_id, const ErrorReply& err) {
    spdlog::debug("grpc Session {}: turn {} refused: {}", session_id_, request_id, err.message);
    pb::SessionResponse m;
    m.mutable_error()->set_request_id(request_id);
    m.mutable_error()->set_code(static_cast<int>(err.grpc_code));
    m.mutable_error()->set_message(err.message);
    out_.push_back(std::move(m));
  }

  // Starts a read unless one is pending, the client is done, or control messages wait.
  void read_more_locked() {
    if (reading_ || reads_done_ || finish_called_ || !out_.empty()) return;
    reading_ = true;
    StartRead(&in_);
  }

  // Starts the next write: a waiting control message, else the running turn's ready events.
  // Finishes the call when the client is done and nothing is left.
  void pump_locked() {
    if (writing_ || finish_called_) return;
    if (out_.empty() && turn_ && !turn_->final_written) poll_turn_locked();
    if (!out_.empty()) {
      msg_ = std::move(out_.front());
      out_.pop_front();
      writing_ = true;
      StartWrite(&msg_);
      return;
    }
    if (reads_done_ && !turn_) finish_locked(grpc::Status::OK);
  }

  // Moves the turn's ready events into out_: one message with its tokens (and its final
  // information when it ended), or a TurnError when it failed.
  void poll_turn_locked() {
    events_.clear();
    turn_->handle.poll(events_);
    if (events_.empty()) return;
    pb::SessionResponse m;
    pb::GenerateResponse* g = m.mutable_turn();
    g->set_request_id(turn_->request_id);
    bool has_tokens = false;
    std::optional<ErrorReply> failed;
    for (const RequestEvent& ev : events_) {
      if (const auto* c = std::get_if<TokenChunk>(&ev)) {
        append_chunk(*g, turn_->tool_calls.on_chunk(*g, *c), *tokenizer_);
        turn_->text += c->text;
        has_tokens |= !c->ids.empty() || !c->text.empty();
        continue;
      }
      const FinalEvent& f = std::get<FinalEvent>(ev);
      finish_session_turn(ctx_, turn_->plan, f, turn_->text);
      log_turn(f);
      turn_->final_written = true;
      if (f.reason == FinishReason::kError) {
        failed = map_error(f.error_code, f.error_message);
      } else {
        const bool called = turn_->tool_calls.on_final(*g);
        fill_final(*g->mutable_final(), f);
        if (called && f.reason == FinishReason::kStop)
          g->mutable_final()->set_finish_reason("tool_calls");
        has_tokens = true;
      }
    }
    if (has_tokens) out_.push_back(std::move(m));
    if (failed) turn_error_locked(turn_->request_id, *failed);
  }

  void log_turn(const FinalEvent& f) {
    const int status = f.reason == FinishReason::kError
                           ? static_cast<int>(map_error(f.error_code, "").grpc_code)
                           : 0;
    ctx_.access_log(AccessRecord{
        "grpc", "Session", turn_->request_id, status, finish_reason_name(f.reason),
        static_cast<int>(turn_->plan.prompt.size()), f.usage.completion_tokens, f.timings});
  }

  // Closes a session the call created before the status goes out, so a client that sees the
  // call end finds the session gone.
  void finish_locked(const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    if (owned_) close_owned_session();
    Finish(status);
  }

  // The call created the session: it ends with the call (its cache freed), even while the
  // server drains. By incarnation: when the session was deleted and another client created one
  // with the same id, that one stays open.
  void close_owned_session() {
    owned_ = false;
    if (ServingEngine* engine = ctx_.engine()) engine->close_session(session_id_, incarnation_);
  }

  ServingContext& ctx_;
  std::shared_ptr<WakeQueue> wakes_;
  grpc::CallbackServerContext* call_;
  std::shared_ptr<ReactorLink> link_;
  std::mutex mu_;
  std::string session_id_;    // empty until opened
  uint64_t incarnation_ = 0;  // of the session opened (SessionInfo::incarnation)
  bool owned_ = false;        // created by this call: closed at its end
  std::optional<Turn> turn_;
  const Tokenizer* tokenizer_ = nullptr;  // the engine's, set at the first turn; outlives calls
  std::deque<pb::SessionResponse> out_;
  std::vector<RequestEvent> events_;
  pb::SessionRequest in_;    // the read in flight
  pb::SessionResponse msg_;  // the write in flight
  bool reading_ = false, writing_ = false, reads_done_ = false, finish_called_ = false;
};

}  // namespace

grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* start_session_call(
    ServingContext& ctx, std::shared_ptr<WakeQueue> wakes, grpc::CallbackServerContext* call) {
  return new SessionReactor(ctx, std::move(wakes), call);
}

}  // namespace rill::server
