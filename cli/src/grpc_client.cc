#include "grpc_client.h"

#include <fstream>
#include <sstream>

#include "ucudnn/proto/grpc_status.h"

namespace ucudnn::cli {

std::shared_ptr<grpc::Channel> MakeChannel(const ServerOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (options.tls_ca_file.empty()) {
    return grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args);
  }
  std::ifstream in(options.tls_ca_file);
  std::stringstream ca;
  ca << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca.str();
  return grpc::CreateCustomChannel(options.address, grpc::SslCredentials(ssl), args);
}

std::unique_ptr<grpc::ClientContext> MakeContext(const ServerOptions& options,
                                                 int64_t deadline_ms) {
  auto context = std::make_unique<grpc::ClientContext>();
  const int64_t ms = deadline_ms > 0 ? deadline_ms : options.deadline_ms;
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
  if (!options.token.empty()) context->AddMetadata("authorization", "Bearer " + options.token);
  return context;
}

Status FromGrpc(const grpc::Status& status, const ServerOptions& options) {
  if (status.ok()) return Status::Ok();
  return ucudnn::FromGrpc(status).WithContext(options.address);
}

}  // namespace ucudnn::cli
