#include "clients/rill_loadtest/remote_tokenizer.h"

#include <stdexcept>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "clients/common/grpc_status_name.h"
#include "clients/rill_loadtest/sync_http.h"
#include "rill/v1/rill.grpc.pb.h"

namespace rill::loadtest {

std::vector<int32_t> tokenize_remote(const LoadTestOptions& o, const std::string& text) {
  if (o.use_grpc) {
    auto stub = ::rill::v1::Rill::NewStub(
        grpc::CreateChannel(o.transport.target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ::rill::v1::TokenizeRequest req;
    req.set_text(text);
    req.set_add_special_tokens(false);
    ::rill::v1::TokenizeResponse resp;
    const grpc::Status status = stub->Tokenize(&ctx, req, &resp);
    if (!status.ok())
      throw std::runtime_error("Tokenize on " + o.transport.target + ": " +
                               rill::client::grpc_status_name(status.error_code()) + " " +
                               status.error_message());
    return {resp.token_ids().begin(), resp.token_ids().end()};
  }
  const nlohmann::json body = {{"prompt", text}, {"add_special_tokens", false}};
  const HttpReply reply = http_call("POST", o.transport.target + "/tokenize", body.dump(), 30);
  const nlohmann::json j = nlohmann::json::parse(reply.body, nullptr, false);
  if (reply.status != 200 || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    throw std::runtime_error("POST /tokenize on " + o.transport.target + ": HTTP " +
                             std::to_string(reply.status) + " " + reply.body);
  return j["tokens"].get<std::vector<int32_t>>();
}

}  // namespace rill::loadtest
