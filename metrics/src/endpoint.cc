#include "ucudnn/metrics/endpoint.h"

#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

// Debian's CivetWeb (1.15) starts its threads with 100 KiB stacks (USE_STACK_SIZE), and glibc
// carves the process's static TLS out of every thread's stack: OpenBLAS, which core links, has
// 60 KiB of it, which left CivetWeb's workers too little to answer a scrape (SIGSEGV in
// mg_printf). This definition, exported from the executable (see metrics/CMakeLists.txt),
// interposes the C library's for every caller: a stack size below kMinThreadStackBytes is raised
// to it, larger ones pass unchanged (the default, 8 MiB, is not set through it).
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using SetStackSize = int (*)(pthread_attr_t*, size_t);
  static const auto next =
      reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return next(attr, std::max(size, ucudnn::metrics::kMinThreadStackBytes));
}

namespace ucudnn::metrics {
namespace {

// Connects to host:port and hangs up at once, until `done`: each connection wakes CivetWeb's
// accepting thread, which otherwise notices a stop only at the end of its 2 s poll.
void WakeUntil(const std::string& host, int port, const std::atomic<bool>& done) {
  addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0) return;
  while (!done.load()) {
    const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      [[maybe_unused]] const int connected = connect(fd, found->ai_addr, found->ai_addrlen);
      close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  freeaddrinfo(found);
}

}  // namespace

Result<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("address: must be HOST:PORT, got '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  const std::string port_text = address.substr(colon + 1);
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return InvalidArgument("address: bad port in '" + address + "'");
  }
  return std::make_pair(host, port);
}

Result<std::unique_ptr<Endpoint>> Endpoint::Start(
    const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable) {
  UCUDNN_ASSIGN_OR_RETURN(const auto host_port, SplitHostPort(listen));
  if (host_port.first.find(':') != std::string::npos) {
    return InvalidArgument("metrics: cannot listen on " + listen +
                           ": IPv6 addresses are not supported (CivetWeb built without IPv6); "
                           "give an IPv4 address or a host name");
  }
  std::unique_ptr<Endpoint> endpoint(new Endpoint());
  endpoint->collectable_ = std::move(collectable);
  // CivetWeb sets SO_REUSEADDR only, never SO_REUSEPORT: a second server on the port fails.
  std::vector<std::string> options = {
      "listening_ports",    host_port.first + ":" + std::to_string(host_port.second),
      "num_threads",        std::to_string(kThreads),
      "request_timeout_ms", std::to_string(kRequestTimeoutMs),
      "max_request_size",   std::to_string(kMaxRequestBytes),
      "enable_keep_alive",  "no"};
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(std::move(options));
  } catch (const std::exception&) {
    // Not kUnavailable: the caller does not retry an address that another process holds.
    return FailedPrecondition("metrics: cannot listen on " + listen +
                              " (address in use by another process, or not local)");
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  endpoint->port_ = ports.empty() ? 0 : ports.front();
  const std::string& host = host_port.first;
  endpoint->wake_host_ = host.empty() || host == "0.0.0.0" ? "127.0.0.1" : host;
  endpoint->exposer_->RegisterCollectable(endpoint->collectable_, "/metrics");
  return endpoint;
}

Endpoint::~Endpoint() { Stop(); }

void Endpoint::Stop() {
  if (!exposer_) return;
  std::atomic<bool> stopped{false};
  std::thread waker([&] { WakeUntil(wake_host_, port_, stopped); });
  exposer_.reset();
  stopped = true;
  waker.join();
}

}  // namespace ucudnn::metrics
