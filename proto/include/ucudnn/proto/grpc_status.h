// The one mapping between our Status codes and gRPC's, used at every service edge (server,
// client library, CLI). Part of ucudnn::proto, not of the core: the core stays gRPC-free.
#pragma once

#include <grpcpp/support/status.h>

#include "ucudnn/core/status.h"

namespace ucudnn {

grpc::StatusCode ToGrpcCode(StatusCode code);
StatusCode FromGrpcCode(grpc::StatusCode code);
grpc::Status ToGrpc(const Status& status);
Status FromGrpc(const grpc::Status& status);

}  // namespace ucudnn
