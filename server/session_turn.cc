#include "server/session_turn.h"

#include <algorithm>
#include <cctype>

#include "engine/error.h"
#include "server/chat_prompt.h"
#include "server/error_mapping.h"

namespace rill::server {
namespace {

// Runs `f`, forgetting session `id` when the engine answers that it does not know it.
template <typename F>
auto forgetting_unknown(ServingContext& ctx, const std::string& id, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) ctx.sessions().forget(id);
    throw;
  }
}

const char* kind_name(TurnKind k) {
  return k == TurnKind::kChat ? "chat messages" : "a prompt (text or token ids)";
}

}  // namespace

TurnPlan plan_session_turn(ServingContext& ctx, const std::string& id, const TurnInput& in) {
  ServingEngine& engine = ctx.require_engine();
  TurnPlan plan;
  plan.session_id = id;
  plan.info = forgetting_unknown(ctx, id, [&] { return engine.session_info(id); });
  // The first turn starts the stream like a plain request (BOS where the model wants one);
  // later turns continue it, so their text is encoded without special tokens.
  const bool first = plan.info.tokens_seen == 0;
  const SessionEntry entry = ctx.sessions().get(id).value_or(SessionEntry{});
  plan.kind = in.kind == TurnInput::Kind::kChat ? TurnKind::kChat : TurnKind::kRaw;
  if (entry.kind != TurnKind::kAny && entry.kind != plan.kind)
    throw Error(ErrorCode::kInvalidArgument,
                "session " + id + " takes " + kind_name(entry.kind) + ", as its first turn did");
  switch (in.kind) {
    case TurnInput::Kind::kText:
      plan.prompt = ctx.encode_prompt(in.text, /*has_special_tokens=*/!first);
      break;
    case TurnInput::Kind::kTokens:
      plan.prompt = in.ids;
      break;
    case TurnInput::Kind::kChat: {
      plan.history = first ? nlohmann::json::array() : entry.history;
      plan.reply_end = first ? std::string() : entry.reply_end;
      plan.new_messages = in.messages;
      const std::string text =
          chat_turn_delta(ctx.chat(), plan.history, plan.reply_end, in.messages);
      plan.prompt = ctx.encode_prompt(text, !first || ctx.chat().has_special_tokens());
      break;
    }
  }
  return plan;
}

Request session_request(const TurnPlan& plan) {
  Request r;
  r.session_id = plan.session_id;
  r.prompt = plan.prompt;
  r.sampling = plan.info.options.sampling;
  r.max_tokens = plan.info.options.max_tokens;
  r.cache = plan.info.options.cache;
  return r;
}

RequestHandle submit_session_turn(ServingContext& ctx, Request r, EventNotifier notify) {
  const std::string id = r.session_id;
  return forgetting_unknown(
      ctx, id, [&] { return ctx.require_engine().submit(std::move(r), std::move(notify)); });
}

void finish_session_turn(ServingContext& ctx, const TurnPlan& plan, const FinalEvent& f,
                         const std::string& reply) {
  if (f.reason == FinishReason::kError) {
    if (f.error_code == ErrorCode::kNotFound) ctx.sessions().forget(plan.session_id);
    return;
  }
  if (plan.kind != TurnKind::kChat) {
    ctx.sessions().update(plan.session_id, plan.kind, nlohmann::json::array(), {});
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
  ctx.sessions().update(plan.session_id, plan.kind,
                        next_chat_history(plan.history, plan.new_messages, reply),
                        std::move(reply_end));
}

SessionInfo create_session(ServingContext& ctx, SessionOptions options) {
  // Ids travel in URL paths (/v1/sessions/{id}), whichever front end made them: keep them to
  // characters that need no escape.
  for (char c : options.id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      throw FieldError("id", "'id' may hold only letters, digits, '-', '_' and '.'");
  ServingEngine& engine = ctx.require_engine();
  const size_t limit = static_cast<size_t>(std::max(1, engine.config().max_sessions));
  if (ctx.sessions().size() >= limit) {
    for (const std::string& id : ctx.sessions().ids()) {
      try {
        engine.session_info(id);
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kNotFound) ctx.sessions().forget(id);
      }
    }
  }
  SessionInfo info = engine.create_session(std::move(options));
  ctx.sessions().add(info.options.id);
  return info;
}

SessionInfo get_session(ServingContext& ctx, const std::string& id) {
  ServingEngine& engine = ctx.require_engine();
  return forgetting_unknown(ctx, id, [&] { return engine.session_info(id); });
}

bool delete_session(ServingContext& ctx, const std::string& id) {
  // Not require_engine(): freeing a session is welcome while the server drains.
  ServingEngine* engine = ctx.engine();
  if (!engine) throw Error(ErrorCode::kUnavailable, "the model is loading");
  ctx.sessions().forget(id);
  return engine->close_session(id);
}

}  // namespace rill::server
