// gRPC messages -> engine requests, as the gRPC front end converts them: the input's bytes are
// parsed as a serialized rill.v1 message (the wire format the server receives) and converted
// with the functions the service uses: to_request (Generate: text, token ids or chat messages
// through the chat template; sampling, generation fields, cache policy, deadline), from_pb
// (CreateSession, a Session call's open), and a Session call's turn on the fixture's session
// "s" (as grpc_session.cc's turn_locked: plan_session_turn, session_request, apply_sampling,
// apply_generation_fields, check_prompt). Every request then passes the engine's submit checks;
// any exception must map to a 4xx answer (serving_fixture.h).
//
// Input: byte 0 picks the message (even: GenerateRequest; odd: SessionRequest), the rest is its
// serialized form. Seeds: tests/fuzz/corpus/grpc_request (made with protoc --encode,
// docs/fuzzing.md).
#include <cstddef>
#include <cstdint>

#include <google/protobuf/stubs/logging.h>

#include "rill/v1/rill.pb.h"
#include "server/grpc_convert.h"
#include "server/grpc_request.h"
#include "server/session_turn.h"
#include "tests/fuzz/serving_fixture.h"

namespace {

namespace pb = ::rill::v1;
using rill::fuzz::ServingFixture;

// grpc_session.cc's turn_input.
rill::server::TurnInput turn_input(const pb::SessionTurn& t) {
  rill::server::TurnInput in;
  switch (t.input_case()) {
    case pb::SessionTurn::kText:
      in.text = t.text();
      break;
    case pb::SessionTurn::kTokenIds:
      in.kind = rill::server::TurnInput::Kind::kTokens;
      in.ids.assign(t.token_ids().ids().begin(), t.token_ids().ids().end());
      break;
    case pb::SessionTurn::kMessages:
      in.kind = rill::server::TurnInput::Kind::kChat;
      in.messages = rill::server::chat_messages_json(t.messages());
      break;
    default:
      throw rill::Error(rill::ErrorCode::kInvalidArgument, "no input");
  }
  return in;
}

void session_turn(ServingFixture& fx, const pb::SessionTurn& t) {
  rill::server::TurnPlan plan =
      rill::server::plan_session_turn(fx.ctx(), rill::fuzz::kSessionId, turn_input(t));
  rill::Request r = rill::server::session_request(plan);
  r.id = t.request_id().empty() ? "grpc-fuzz" : t.request_id();
  rill::server::apply_sampling(t.sampling(), r.sampling);
  rill::server::apply_generation_fields(t, r, fx.ctx().model().vocab_size);
  fx.ctx().check_prompt(r.prompt, "input");
  fx.validate(r);
}

void session_request(ServingFixture& fx, const pb::SessionRequest& m) {
  if (m.has_turn()) return session_turn(fx, m.turn());
  if (!m.has_open()) return;
  if (m.open().has_create())
    return fx.validate(
        rill::server::from_pb(m.open().create(), fx.ctx().model().sampling_defaults));
  // attach: a read-only lookup (unknown ids are kNotFound).
  rill::server::get_session(fx.ctx(), m.open().attach_session_id());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Strings with invalid UTF-8 fail to parse (as on the server); protobuf logs each: keep quiet.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  ServingFixture::get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  ServingFixture& fx = ServingFixture::get();
  const int n = static_cast<int>(size - 1);
  if (data[0] % 2 == 0) {
    pb::GenerateRequest m;
    if (!m.ParseFromArray(data + 1, n)) return 0;  // the server refuses it before any handler
    grpc::CallbackServerContext call;
    rill::fuzz::as_front_end([&] { fx.validate(rill::server::to_request(fx.ctx(), m, &call)); });
  } else {
    pb::SessionRequest m;
    if (!m.ParseFromArray(data + 1, n)) return 0;
    rill::fuzz::as_front_end([&] { session_request(fx, m); });
  }
  return 0;
}
