// Ids of requests and sessions: their length limit, and the unguessable ids the server assigns.
// An id the server assigns is a capability (whoever holds it may cancel the request, or take
// turns in and delete the session: docs/api.md, "Who may cancel what"), so it carries 128 bits
// from the kernel's CSPRNG and nothing a client could count or predict (no counter, no salt).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rill {

/// Longest session or request id, in bytes: ids travel in URL paths and log lines.
inline constexpr size_t kMaxIdBytes = 128;

/// `prefix` followed by 32 lowercase hex digits: 128 bits from getrandom(2). Throws kInternal
/// when the kernel gives none (it only ever blocks, briefly, before its pool is seeded at boot).
std::string random_id(std::string_view prefix);

/// Throws kInvalidArgument, naming `what` ("session id", "request id") and the limit, for an id
/// longer than kMaxIdBytes.
void check_id_length(std::string_view id, std::string_view what);

}  // namespace rill
