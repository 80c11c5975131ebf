// Who may name a gRPC request by its id (docs/api.md, "Who may cancel what"). The server has no
// authentication, so the rights follow what a caller can know:
//   - an id the server assigned (empty request_id; every HTTP request) is 128 random bits, and
//     holding it is the right to Cancel it, from any connection;
//   - an id the client chose can be guessed, so it is scoped to the caller's connection: only a
//     Cancel on the same connection finds it, and two connections may use the same id.
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>

namespace rill::server {

/// The scope of the requests a call may name: its connection (the peer address, one per
/// HTTP/2 connection). Never empty.
std::string caller_scope(const grpc::CallbackServerContext& call);

/// Request::id_scope for a request whose client-given id is `client_id`: "" when empty (the
/// server assigns an unguessable id), else caller_scope(call). Throws FieldError "request_id"
/// (kInvalidArgument) for an id over kMaxIdBytes or with other than visible ASCII characters.
std::string request_id_scope(const std::string& client_id, const grpc::CallbackServerContext& call);

}  // namespace rill::server
