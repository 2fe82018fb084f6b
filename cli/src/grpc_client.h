// How the CLI reaches a server: one channel per invocation, a deadline on every call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "ucudnn/core/status.h"

namespace ucudnn::cli {

struct ServerOptions {
  std::string address = "127.0.0.1:50051";
  std::string tls_ca_file;  // empty: plaintext; set: TLS verified against this CA bundle
  std::string token;        // bearer token, for calls that write
  int64_t deadline_ms = 30000;
};

// The server flags of one subcommand as given: the token may come from a file.
struct ServerFlags {
  ServerOptions options;
  std::string token_file;  // --token-file
};
// The options a command uses: the token read from --token-file (else, when no token was given,
// from UCUDNN_TOKEN_FILE), the CA file from UCUDNN_TLS_CA (the deprecated name of
// UCUDNN_CA_FILE) when neither --tls-ca nor UCUDNN_CA_FILE named one. kInvalidArgument for a token
// file that cannot be read or holds no token.
Result<ServerOptions> ResolveServerOptions(const ServerFlags& flags);
// The token of a token file: its first line that is neither empty nor a comment, either TOKEN or
// ROLE TOKEN (the server's --token-file format).
Result<std::string> ReadTokenFile(const std::string& path);

std::shared_ptr<grpc::Channel> MakeChannel(const ServerOptions& options);
// A context with the options' deadline (or `deadline_ms` when positive) and the token.
std::unique_ptr<grpc::ClientContext> MakeContext(const ServerOptions& options,
                                                 int64_t deadline_ms = 0);
// One unary call on a fresh stub of the method's service, with MakeContext()'s deadline and token:
// CallUnary(server, &CatalogService::Stub::ListJobs, request, &response).
template <typename Stub, typename Request, typename Response>
grpc::Status CallUnary(const ServerOptions& options,
                       grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                    Response*),
                       const Request& request, Response* response) {
  Stub stub(MakeChannel(options));
  auto context = MakeContext(options);
  return (stub.*method)(context.get(), request, response);
}
// The gRPC status as ours, with the address in the message.
Status FromGrpc(const grpc::Status& status, const ServerOptions& options);

}  // namespace ucudnn::cli
