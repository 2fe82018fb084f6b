#include "grpc_client.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ucudnn/proto/grpc_status.h"

namespace ucudnn::cli {

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--token-file: cannot open '" + path + "'");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first, second;
    if (!(words >> first) || first.front() == '#') continue;
    return (words >> second) ? second : first;
  }
  return InvalidArgument("--token-file: '" + path + "' holds no token");
}

Result<ServerOptions> ResolveServerOptions(const ServerFlags& flags) {
  ServerOptions options = flags.options;
  if (!flags.token_file.empty()) {
    UCUDNN_ASSIGN_OR_RETURN(options.token, ReadTokenFile(flags.token_file));
  } else if (const char* file = std::getenv("UCUDNN_TOKEN_FILE");
             options.token.empty() && file != nullptr && *file != '\0') {
    UCUDNN_ASSIGN_OR_RETURN(options.token, ReadTokenFile(file));
  }
  if (const char* old_ca = std::getenv("UCUDNN_TLS_CA");
      options.tls_ca_file.empty() && old_ca != nullptr && *old_ca != '\0') {
    spdlog::warn("UCUDNN_TLS_CA is deprecated: set UCUDNN_CA_FILE (the client library's name)");
    options.tls_ca_file = old_ca;
  }
  return options;
}

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
