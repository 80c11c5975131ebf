// The server's session pieces (session_turn.h) on a CPU engine, without a network: the state a
// turn keeps belongs to the session incarnation it was planned against, never to a later
// session that took the same id; ids over the limit are refused naming the limit; the request
// ids the server assigns are 128 random bits.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "server/error_mapping.h"
#include "server/serving_context.h"
#include "server/session_turn.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill::server {
namespace {

using rill::testing::collect;
using rill::testing::EngineFixture;

struct ServerFixture {
  ServerFixture() : ctx(ServerConfig{}) {
    ModelInfo info;
    info.served_name = "rill-shakespeare";
    ctx.set_engine(f.engine.get(), info, std::make_unique<BuiltinChatRenderer>());
  }
  ~ServerFixture() { ctx.clear_engine(); }
  EngineFixture f;
  ServingContext ctx;
};

SessionOptions streaming(const std::string& id) {
  SessionOptions o;
  o.id = id;
  o.cache = CachePolicy::streaming(4, 60);
  return o;
}

TurnInput tokens(std::vector<int32_t> ids) {
  TurnInput in;
  in.kind = TurnInput::Kind::kTokens;
  in.ids = std::move(ids);
  return in;
}

TurnInput chat(const std::string& content) {
  TurnInput in;
  in.kind = TurnInput::Kind::kChat;
  in.messages =
      normalize_chat_messages(nlohmann::json::array({{{"role", "user"}, {"content", content}}}));
  return in;
}

// Regression (issue 27): DELETE during a running turn, then a new session with the same id: the
// old turn's end updated the new session's state by name (fixing its kind to the old turn's, so
// its first chat turn was refused), and a turn planned against the old one could run in it.
TEST(SessionTurns, ATurnsEndKeepsItsStateInItsOwnSessionOnly) {
  ServerFixture s;
  const SessionInfo old_info = create_session(s.ctx, streaming("x"));
  const TurnPlan old_plan = plan_session_turn(s.ctx, "x", tokens({5, 6, 7}));
  Request r = session_request(old_plan);
  r.max_tokens = 100000;
  r.ignore_eos = true;
  RequestHandle old_turn = submit_session_turn(s.ctx, r, {});
  EXPECT_TRUE(delete_session(s.ctx, "x"));
  const SessionInfo fresh = create_session(s.ctx, streaming("x"));
  ASSERT_NE(fresh.incarnation, old_info.incarnation);
  // The old turn's final event arrives after the new session exists, as it may over HTTP.
  const FinalEvent final = collect(old_turn).final;
  EXPECT_EQ(final.reason, FinishReason::kCancelled);
  finish_session_turn(s.ctx, old_plan, final, "");

  // The new session takes either kind of first turn: a chat one here.
  const TurnPlan chat_plan = plan_session_turn(s.ctx, "x", chat("Good morrow."));
  EXPECT_EQ(chat_plan.info.incarnation, fresh.incarnation);
  EXPECT_EQ(session_entry(chat_plan.info)->history().kind, TurnKind::kAny);
  // A turn planned against the old session is refused rather than run in the new one.
  try {
    submit_session_turn(s.ctx, session_request(old_plan), {});
    ADD_FAILURE() << "a turn of the closed session ran in the new one";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
  }
  try {
    plan_session_turn(s.ctx, "x", tokens({1}), old_info.incarnation);
    ADD_FAILURE() << "planned against a closed incarnation";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
  }
  // Closing by the old incarnation (a gRPC Session call that created it, ending) is a no-op.
  EXPECT_FALSE(delete_session(s.ctx, "x", old_info.incarnation));
  EXPECT_EQ(get_session(s.ctx, "x").incarnation, fresh.incarnation);
  RequestHandle h = submit_session_turn(s.ctx, session_request(chat_plan), {});
  const FinalEvent chat_final = collect(h).final;
  EXPECT_NE(chat_final.reason, FinishReason::kError) << chat_final.error_message;
  finish_session_turn(s.ctx, chat_plan, chat_final, "reply");
  EXPECT_EQ(session_entry(get_session(s.ctx, "x"))->history().kind, TurnKind::kChat);
}

TEST(SessionTurns, IdsOverTheLimitAreRefusedNamingIt) {
  ServerFixture s;
  const std::string longest(128, 'i');
  EXPECT_EQ(create_session(s.ctx, streaming(longest)).options.id, longest);
  try {
    create_session(s.ctx, streaming(longest + "i"));
    ADD_FAILURE() << "no error";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "id");
    EXPECT_STREQ(e.what(), "session id is 129 bytes, over the limit of 128");
  }
  const std::string huge(100000, 'i');
  for (auto call :
       {+[](ServingContext&c, const std::string&id) { get_session(c, id); },
        +[](ServingContext&c, const std::string&id) { delete_session(c, id); },
        +[](ServingContext&c, const std::string&id) { plan_session_turn(c, id, tokens({1})); }}) {
    try {
      call(s.ctx, huge);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_STREQ(e.what(), "session id is 100000 bytes, over the limit of 128");
    }
  }
}

TEST(SessionTurns, AssignedRequestIdsAre128RandomBits) {
  const std::regex shape("cmpl-[0-9a-f]{32}");
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = ServingContext::new_request_id("cmpl-");
    EXPECT_TRUE(std::regex_match(id, shape)) << id;
    seen.insert(id.substr(5, 16));  // no 64-bit prefix repeats (a salt would)
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace rill::server
