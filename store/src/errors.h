// The store boundary: every libpqxx exception becomes a Status here (store.h lists the mapping).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "ucudnn/core/status.h"

namespace ucudnn::store::internal {

// status.h has no helper for this one code.
inline Status AlreadyExists(std::string message) {
  return {StatusCode::kAlreadyExists, std::move(message)};
}

struct MappedError {
  Status status;
  // The connection is unusable (broken, server shutting down, outcome in doubt): drop it.
  bool connection_lost = false;
};

// Maps the exception being handled (call only inside a catch block) to a Status whose message
// starts with `operation`.
MappedError MapCurrentException(std::string_view operation);

// Like MapCurrentException for a failed connect: a malformed URL is kInvalidArgument ("url: ..."),
// any other failure to connect kUnavailable.
Status MapConnectException(std::string_view operation);

// Maps a SQLSTATE and server message; exposed for tests of the mapping.
MappedError MapSqlState(std::string_view operation, std::string_view sqlstate,
                        std::string_view message);

// pqxx messages end with a newline and sometimes carry the query; keep the first line.
std::string FirstLine(std::string_view message);

}  // namespace ucudnn::store::internal
