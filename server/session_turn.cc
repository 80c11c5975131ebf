#include "server/session_turn.h"

#include <cctype>

#include "engine/error.h"
#include "engine/serving/ids.h"
#include "server/chat_prompt.h"
#include "server/error_mapping.h"

namespace rill::server {
namespace {

const char* kind_name(TurnKind k) {
  return k == TurnKind::kChat ? "chat messages" : "a prompt (text or token ids)";
}

}  // namespace

void check_session_id(const std::string& id, const char* param) {
  try {
    check_id_length(id, "session id");
  } catch (const Error& e) {
    if (!param) throw;
    throw FieldError(param, e.what());
  }
}

TurnPlan plan_session_turn(ServingContext& ctx, const std::string& id, const TurnInput& in,
                           uint64_t incarnation) {
  ServingEngine& engine = ctx.require_engine();
  check_session_id(id);
  TurnPlan plan;
  plan.session_id = id;
  plan.info = engine.session_info(id);
  if (incarnation != 0 && plan.info.incarnation != incarnation)
    throw Error(ErrorCode::kNotFound,
                "session " + id + " was closed (a new session has the same id)");
  plan.entry = session_entry(plan.info);
  // The first turn starts the stream like a plain request (BOS where the model wants one);
  // later turns continue it, so their text is encoded without special tokens.
  const bool first = plan.info.tokens_seen == 0;
  const TurnHistory past = plan.entry ? plan.entry->history() : TurnHistory{};
  plan.kind = in.kind == TurnInput::Kind::kChat ? TurnKind::kChat : TurnKind::kRaw;
  if (past.kind != TurnKind::kAny && past.kind != plan.kind)
    throw Error(ErrorCode::kInvalidArgument,
                "session " + id + " takes " + kind_name(past.kind) + ", as its first turn did");
  switch (in.kind) {
    case TurnInput::Kind::kText:
      plan.prompt = ctx.encode_prompt(in.text, /*has_special_tokens=*/!first);
      break;
    case TurnInput::Kind::kTokens:
      plan.prompt = in.ids;
      break;
    case TurnInput::Kind::kChat: {
      plan.history = first ? nlohmann::json::array() : past.history;
      plan.reply_end = first ? std::string() : past.reply_end;
      plan.new_messages = in.messages;
      const std::string text =
          chat_turn_delta(ctx.chat(), plan.history, plan.reply_end, in.messages, in.tools);
      plan.prompt = ctx.encode_prompt(text, !first || ctx.chat().has_special_tokens());
      break;
    }
  }
  return plan;
}

Request session_request(const TurnPlan& plan) {
  Request r;
  r.session_id = plan.session_id;
  r.session_incarnation = plan.info.incarnation;
  r.prompt = plan.prompt;
  r.sampling = plan.info.options.sampling;
  r.max_tokens = plan.info.options.max_tokens;
  r.cache = plan.info.options.cache;
  return r;
}

RequestHandle submit_session_turn(ServingContext& ctx, Request r, EventNotifier notify) {
  return ctx.require_engine().submit(std::move(r), std::move(notify));
}

void finish_session_turn(ServingContext& ctx, const TurnPlan& plan, const FinalEvent& f,
                         const std::string& reply) {
  // Only the entry of the session this turn belongs to: the client may have closed it and
  // created another with the same id meanwhile, which this turn must leave alone.
  if (!plan.entry || f.reason == FinishReason::kError) return;
  if (plan.kind != TurnKind::kChat) {
    plan.entry->set_history({plan.kind, nlohmann::json::array(), {}});
    return;
  }
  // The turn's last sample is fed to the cache by the next turn: when it is the stop token (or
  // completes the stop string), its text follows the reply there.
  std::string reply_end = f.stop_string;
  if (f.stop_token) {
    if (const ServingEngine* engine = ctx.engine())
      reply_end = engine->tokenizer().decode(std::vector<int32_t>{*f.stop_token},
                                             /*skip_special_tokens=*/false);
  }
  plan.entry->set_history(
      {plan.kind, next_chat_history(plan.history, plan.new_messages, reply), std::move(reply_end)});
}

SessionInfo create_session(ServingContext& ctx, SessionOptions options) {
  check_session_id(options.id, "id");
  // Ids travel in URL paths (/v1/sessions/{id}), whichever front end made them: keep them to
  // characters that need no escape.
  for (char c : options.id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      throw FieldError("id", "'id' may hold only letters, digits, '-', '_' and '.'");
  ServingEngine& engine = ctx.require_engine();
  options.attachment = std::make_shared<SessionEntry>();
  return engine.create_session(std::move(options));
}

SessionInfo get_session(ServingContext& ctx, const std::string& id) {
  ServingEngine& engine = ctx.require_engine();
  check_session_id(id);
  return engine.session_info(id);
}

bool delete_session(ServingContext& ctx, const std::string& id, uint64_t incarnation) {
  // Not require_engine(): freeing a session is welcome while the server drains.
  ServingEngine* engine = ctx.engine();
  if (!engine) throw Error(ErrorCode::kUnavailable, "the model is loading");
  check_session_id(id);
  return engine->close_session(id, incarnation);
}

}  // namespace rill::server
