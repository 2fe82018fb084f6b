#include "ucudnn/server/malformed_requests.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/interceptor.h>
#include <spdlog/spdlog.h>

#include "ucudnn/server/server_metrics.h"

namespace ucudnn::server {
namespace {

using grpc::experimental::InterceptionHookPoints;
using Clock = std::chrono::steady_clock;

// A flood of garbage must not flood the log: one warning per interval, the rest at debug.
constexpr auto kWarnInterval = std::chrono::seconds(10);
std::atomic<int64_t> next_warning_ns{0};

bool TakeWarningSlot() {
  const int64_t now = Clock::now().time_since_epoch().count();
  int64_t next = next_warning_ns.load();
  if (now < next) return false;
  return next_warning_ns.compare_exchange_strong(
      next, now + std::chrono::duration_cast<Clock::duration>(kWarnInterval).count());
}

// "/pkg.Service/Method" -> "Method", the label the RPC metrics use.
std::string_view ShortName(std::string_view grpc_method) {
  const size_t slash = grpc_method.rfind('/');
  return slash == std::string_view::npos ? grpc_method : grpc_method.substr(slash + 1);
}

class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  MalformedRequestInterceptor(grpc::experimental::ServerRpcInfo* info, ServerMetrics* metrics)
      : info_(info), metrics_(metrics), start_(Clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // A failed deserialisation leaves no message: the handler is skipped and only the status
    // is sent. Only where exactly one request message is due: on a stream from the client
    // (reflection's, say) a read without a message is also the stream's normal end.
    if (ExpectsOneRequest() &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      malformed_ = true;
    }
    if (malformed_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::string_view method = info_->method();
      const grpc::Status status(grpc::StatusCode::INVALID_ARGUMENT,
                                MalformedRequestMessage(method));
      methods->ModifySendStatus(status);
      const std::string type = RequestTypeOf(method);
      // Only methods of the services have a metric label (bounded label set).
      if (metrics_ != nullptr && !type.empty()) {
        metrics_->RecordRpc(ShortName(method), status.error_code(),
                            std::chrono::duration<double>(Clock::now() - start_).count());
      }
      if (TakeWarningSlot()) {
        spdlog::warn(
            "{}: malformed request body refused (INVALID_ARGUMENT); further ones are "
            "logged at debug level for {} s",
            method, kWarnInterval.count());
      } else {
        spdlog::debug("{}: malformed request body refused", method);
      }
    }
    methods->Proceed();
  }

 private:
  bool ExpectsOneRequest() const {
    using Type = grpc::experimental::ServerRpcInfo::Type;
    return info_->type() == Type::UNARY || info_->type() == Type::SERVER_STREAMING;
  }

  grpc::experimental::ServerRpcInfo* info_;
  ServerMetrics* metrics_;
  Clock::time_point start_;
  bool malformed_ = false;
};

class MalformedRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MalformedRequestInterceptorFactory(ServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MalformedRequestInterceptor(info, metrics_);
  }

 private:
  ServerMetrics* metrics_;
};

void ProtobufLogHandler(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      spdlog::debug("libprotobuf {}:{}: {}", filename, line, message);
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      spdlog::warn("libprotobuf {}:{}: {}", filename, line, message);
      break;
    case google::protobuf::LOGLEVEL_ERROR:
      // What a caller's bytes can cause ("invalid UTF-8 data when parsing", "Can't parse
      // message"): the interceptor reports the refusal itself.
      if (message.find("parsing") != std::string::npos ||
          message.find("parse message") != std::string::npos) {
        spdlog::debug("libprotobuf {}:{}: {}", filename, line, message);
      } else {
        spdlog::error("libprotobuf {}:{}: {}", filename, line, message);
      }
      break;
    case google::protobuf::LOGLEVEL_FATAL:
      spdlog::critical("libprotobuf {}:{}: {}", filename, line, message);
      break;
  }
}

}  // namespace

std::string RequestTypeOf(std::string_view grpc_method) {
  if (grpc_method.empty() || grpc_method.front() != '/') return {};
  std::string full(grpc_method.substr(1));
  const size_t slash = full.find('/');
  if (slash == std::string::npos) return {};
  full[slash] = '.';
  const auto* method = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full);
  return method != nullptr ? method->input_type()->full_name() : std::string();
}

std::string MalformedRequestMessage(std::string_view grpc_method) {
  std::string type = RequestTypeOf(grpc_method);
  if (type.empty()) type = "request message";
  return "request: not a valid " + type +
         " (malformed protobuf encoding, or a string field that is not valid UTF-8)";
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeMalformedRequestInterceptorFactory(ServerMetrics* metrics) {
  return std::make_unique<MalformedRequestInterceptorFactory>(metrics);
}

void RouteProtobufLogsToSpdlog() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&ProtobufLogHandler); });
}

}  // namespace ucudnn::server
