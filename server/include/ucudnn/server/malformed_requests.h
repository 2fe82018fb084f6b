// Requests whose body is not a valid message of the method's request type (truncated or garbage
// protobuf, or a string field that is not UTF-8). gRPC's synchronous handlers answer those with
// INTERNAL and an empty message, before any handler runs (so no RPC metric counts them), and
// libprotobuf logs an ERROR line per call. The interceptor made here rewrites that answer to
// INVALID_ARGUMENT naming the expected type, records it in the RPC metrics and logs it at most
// once per interval; the protobuf log handler keeps libprotobuf's parse complaints at debug.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/support/server_interceptor.h>

namespace ucudnn::server {

class ServerMetrics;

// "/ucudnn.v1.CatalogService/ListJobs" -> "ucudnn.v1.ListJobsRequest"; empty for a method the
// generated descriptors do not know.
std::string RequestTypeOf(std::string_view grpc_method);

// The status a malformed body of `grpc_method` is answered with.
std::string MalformedRequestMessage(std::string_view grpc_method);

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeMalformedRequestInterceptorFactory(ServerMetrics* metrics);

// Routes libprotobuf's log lines to spdlog (its parse errors, which any caller can trigger, at
// debug level). Process-wide; idempotent.
void RouteProtobufLogsToSpdlog();

}  // namespace ucudnn::server
