// The Prometheus endpoint: GET /metrics over plain HTTP (cpp-httplib), on its own port.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ucudnn/core/status.h"

namespace httplib {
class Server;
}

namespace ucudnn::server {

class MetricsHttpServer {
 public:
  // Binds `listen` (HOST:PORT; port 0 picks one) and serves GET /metrics with `render()`'s text
  // on a background thread. kFailedPrecondition when the address cannot be bound (in use:
  // SO_REUSEPORT is off, so a second server on the port fails).
  static Result<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen,
                                                          std::function<std::string()> render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

// "127.0.0.1:9464" -> ("127.0.0.1", 9464); "[::1]:80" -> ("::1", 80).
Result<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace ucudnn::server
