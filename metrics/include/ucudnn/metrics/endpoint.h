// The Prometheus endpoint of the server and the worker: GET /metrics over plain HTTP on its own
// port, served by prometheus-cpp's Exposer (CivetWeb: a thread per connection from a fixed pool).
// Slow or idle clients cannot starve a scrape while they are fewer than the pool's threads: a
// connection has kRequestTimeoutMs from the moment a thread takes it to send its whole request
// (CivetWeb's request_timeout_ms is a deadline for the request, not a per-read timeout), so
// past the pool a scrape waits at most ceil(held connections / kThreads) x kRequestTimeoutMs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "ucudnn/core/status.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace ucudnn::metrics {

// Threads serving connections, each one connection at a time.
inline constexpr int kThreads = 64;
// From a thread taking a connection to its request's end, and for each write of the answer.
inline constexpr int kRequestTimeoutMs = 250;
// A request (line and headers) longer than this is refused (400): GET /metrics needs a few
// hundred bytes.
inline constexpr int kMaxRequestBytes = 8192;
// The least stack a thread of a process linking this library gets (CivetWeb's ask 100 KiB, of
// which the static TLS takes most; see endpoint.cc).
inline constexpr size_t kMinThreadStackBytes = size_t{1} << 20;

class Endpoint {
 public:
  // Binds `listen` (IPV4-OR-NAME:PORT; port 0 picks one; Debian's CivetWeb is built without
  // IPv6) and serves GET /metrics with what `collectable` collects at each scrape.
  // kFailedPrecondition when the address cannot be bound (in use by another process, or not
  // local), kInvalidArgument for an address that is not HOST:PORT or is IPv6.
  static Result<std::unique_ptr<Endpoint>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  int port() const { return port_; }
  // Stops serving (waits for the scrapes in progress, within kRequestTimeoutMs). Not concurrent
  // with itself.
  void Stop();

 private:
  Endpoint() = default;

  std::shared_ptr<prometheus::Collectable> collectable_;  // the exposer holds a weak_ptr
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string wake_host_;  // where Stop() connects to wake CivetWeb's accepting thread
};

// "127.0.0.1:9464" -> ("127.0.0.1", 9464); "[::1]:80" -> ("::1", 80).
Result<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace ucudnn::metrics
