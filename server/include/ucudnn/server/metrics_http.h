// The Prometheus endpoint: GET /metrics over plain HTTP on its own port, served by one thread
// that polls every connection (no thread per connection): a connection has 5 s from its accept to
// send its request and read the answer, and at 64 connections a new one takes the place of the
// oldest still sending its request, so slow or idle clients cannot starve a scrape. One request
// per connection (Connection: close).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ucudnn/core/status.h"

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
  struct Connection;
  MetricsHttpServer() = default;
  void Serve();
  void Accept(std::vector<Connection>& connections);
  // Reads or writes what the connection is ready for; false when it is done with (closed by the
  // client after its answer, or broken).
  bool Advance(Connection& c);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // Stop() writes a byte to wake the loop
  std::thread thread_;
  int port_ = 0;
};

// The whole HTTP answer (status line, headers, body) to `request` (its line and headers): GET or
// HEAD of /metrics with `render()`'s text, of / with a pointer to /metrics; 404, 405 or 400
// otherwise. Pure but for `render`.
std::string MetricsHttpAnswer(std::string_view request, const std::function<std::string()>& render);

// "127.0.0.1:9464" -> ("127.0.0.1", 9464); "[::1]:80" -> ("::1", 80).
Result<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace ucudnn::server
