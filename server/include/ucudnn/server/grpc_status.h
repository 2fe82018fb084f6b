// How the server answers a Status. The code mapping itself is the project's one mapping,
// ucudnn/proto/grpc_status.h (shared with the client library and the CLI); this header adds what
// only the server needs on top of it.
#pragma once

#include <grpcpp/support/status.h>

#include "ucudnn/core/status.h"
#include "ucudnn/proto/grpc_status.h"

namespace ucudnn::server {

// The one conversion every service answers through (ucudnn::ToGrpc).
inline grpc::Status ToGrpcStatus(const Status& status) { return ToGrpc(status); }
// "OK", "INVALID_ARGUMENT", ...: gRPC's own spelling, used as the metrics label.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace ucudnn::server
