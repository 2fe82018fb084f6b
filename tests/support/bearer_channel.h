// A gRPC channel whose calls carry `authorization: Bearer TOKEN`, as a training job's client with
// UCUDNN_TOKEN does: servers refuse writes (enqueueing benchmarks included) to callers without a
// token, so tests that plan for real send one. A call that sets its own authorization metadata
// keeps it (tests of other roles and of wrong tokens).
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ucudnn::test_support {

class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string& token) : value_("Bearer " + token) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      auto* metadata = methods->GetSendInitialMetadata();
      if (metadata->find("authorization") == metadata->end()) {
        metadata->emplace("authorization", value_);
      }
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

class BearerTokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(std::string token) : token_(std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(token_);
  }

 private:
  std::string token_;
};

// A plaintext channel to `target` whose calls carry `token` (none when empty).
inline std::shared_ptr<grpc::Channel> ChannelWithToken(
    const std::string& target, const std::string& token,
    const grpc::ChannelArguments& args = grpc::ChannelArguments()) {
  const auto credentials = grpc::InsecureChannelCredentials();
  if (token.empty()) return grpc::CreateCustomChannel(target, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerTokenInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(factories));
}

}  // namespace ucudnn::test_support
