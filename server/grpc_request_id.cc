#include "server/grpc_request_id.h"

#include "engine/serving/ids.h"
#include "server/error_mapping.h"

namespace rill::server {

std::string caller_scope(const grpc::CallbackServerContext& call) {
  return "grpc-peer " + call.peer();
}

std::string request_id_scope(const std::string& client_id,
                             const grpc::CallbackServerContext& call) {
  if (client_id.empty()) return {};
  try {
    check_id_length(client_id, "'request_id'");
  } catch (const Error& e) {
    throw FieldError("request_id", e.what());
  }
  // Ids appear in log lines and TurnError messages: nothing that could forge or break a line.
  for (char c : client_id)
    if (c <= ' ' || c > '~')
      throw FieldError("request_id",
                       "'request_id' may hold only visible ASCII characters (no spaces or "
                       "control characters)");
  return caller_scope(call);
}

}  // namespace rill::server
