#include "ucudnn/server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

namespace ucudnn::server {
namespace {

using Clock = std::chrono::steady_clock;

// A connection has this long from its accept to send its request and read the answer: a client
// that trickles its request (or never reads) loses its connection, not the endpoint.
constexpr auto kConnectionTimeout = std::chrono::seconds(5);
// Connections served at once; a new one beyond takes the place of the oldest still reading.
constexpr size_t kMaxConnections = 64;
// A request (line and headers) longer than this is refused: GET /metrics needs a few hundred.
constexpr size_t kMaxRequestBytes = 8192;

// Not kUnavailable: the caller does not retry an address that another process holds.
Status CannotBind(const std::string& listen) {
  return FailedPrecondition("metrics: cannot listen on " + listen +
                            " (address in use by another process, or not local)");
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::string HttpResponse(std::string_view status, std::string_view content_type,
                         std::string_view body, bool with_body) {
  std::string out =
      "HTTP/1.1 " + std::string(status) + "\r\nContent-Type: " + std::string(content_type) +
      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (with_body) out += body;
  return out;
}

// A listening socket bound to host:port (port 0: any free one), or -1.
int BindListener(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only (a restart may bind while old connections linger in TIME_WAIT); never
    // SO_REUSEPORT, which would let a second server share the port instead of failing.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0 || !SetNonBlocking(fd)) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage address = {};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
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

std::string MetricsHttpAnswer(std::string_view request,
                              const std::function<std::string()>& render) {
  const std::string_view line = request.substr(0, request.find("\r\n"));
  const size_t first_space = line.find(' ');
  const size_t second_space = line.find(' ', first_space + 1);
  if (first_space == std::string_view::npos || second_space == std::string_view::npos) {
    return HttpResponse("400 Bad Request", "text/plain", "bad request line\n", true);
  }
  const std::string_view method = line.substr(0, first_space);
  std::string_view path = line.substr(first_space + 1, second_space - first_space - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    return HttpResponse("405 Method Not Allowed", "text/plain", "GET only\n", true);
  }
  if (path == "/metrics") {
    return HttpResponse("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(), !head);
  }
  if (path == "/") {
    return HttpResponse("200 OK", "text/plain", "ucudnn: metrics at /metrics\n", !head);
  }
  return HttpResponse("404 Not Found", "text/plain", "not found; metrics at /metrics\n", !head);
}

// One accepted connection: its request as it arrives, then the answer as it leaves.
struct MetricsHttpServer::Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string request;
  std::string answer;  // empty while the request is incomplete
  size_t sent = 0;
  // Answered and shut down for writing: what the client still sends is read and dropped until it
  // closes, so closing never discards the answer (a reset) while the client reads it.
  bool draining = false;
};

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render) {
  UCUDNN_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(listen));
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->render_ = std::move(render);
  server->listen_fd_ = BindListener(host_port.first, host_port.second);
  if (server->listen_fd_ < 0) return CannotBind(listen);
  server->port_ = BoundPort(server->listen_fd_);
  if (pipe2(server->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Internal("metrics: cannot create a pipe");
  }
  server->thread_ = std::thread([self = server.get()] { self->Serve(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  [[maybe_unused]] const ssize_t written = write(wake_[1], &byte, 1);
  thread_.join();
}

void MetricsHttpServer::Accept(std::vector<Connection>& connections) {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: none left (or an error the next poll reports again)
    if (connections.size() >= kMaxConnections) {
      // The oldest connection still sending its request (or already answered) makes way: slow
      // clients go first.
      auto oldest = connections.end();
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        const bool evictable = it->answer.empty() || it->draining;
        if (evictable && (oldest == connections.end() || it->deadline < oldest->deadline)) {
          oldest = it;
        }
      }
      if (oldest == connections.end()) {
        close(fd);  // every place is busy answering: refuse this one
        continue;
      }
      close(oldest->fd);
      connections.erase(oldest);
    }
    connections.push_back({fd, Clock::now() + kConnectionTimeout, {}, {}, 0});
  }
}

bool MetricsHttpServer::Advance(Connection& c) {
  char buffer[4096];
  if (c.draining) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }
  if (c.answer.empty()) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) return false;  // closed before asking
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.request.append(buffer, static_cast<size_t>(n));
    if (c.request.find("\r\n\r\n") != std::string::npos) {
      c.answer = MetricsHttpAnswer(c.request, render_);
    } else if (c.request.size() > kMaxRequestBytes) {
      c.answer = HttpResponse("431 Request Header Fields Too Large", "text/plain",
                              "request too large\n", true);
    } else {
      return true;
    }
  }
  const ssize_t n = send(c.fd, c.answer.data() + c.sent, c.answer.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  c.sent += static_cast<size_t>(n);
  if (c.sent == c.answer.size()) {
    shutdown(c.fd, SHUT_WR);
    c.draining = true;
  }
  return true;
}

void MetricsHttpServer::Serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    auto next_deadline = Clock::time_point::max();
    for (const auto& c : connections) {
      const bool reading = c.answer.empty() || c.draining;
      fds.push_back({c.fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    int timeout_ms = -1;
    if (next_deadline != Clock::time_point::max()) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::ceil<std::chrono::milliseconds>(next_deadline - Clock::now()).count()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      spdlog::error("metrics endpoint: poll failed (errno {}); it stops", errno);
      break;
    }
    if (fds[0].revents != 0) break;  // Stop()
    // Connections first (their pollfds follow the first two in order), then new ones.
    const auto now = Clock::now();
    std::vector<Connection> kept;
    kept.reserve(connections.size());
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const bool ready = fds[i + 2].revents != 0;
      if ((ready && !Advance(c)) || (now >= c.deadline)) {
        close(c.fd);
      } else {
        kept.push_back(std::move(c));
      }
    }
    connections.swap(kept);
    if (fds[1].revents != 0) Accept(connections);
  }
  for (const auto& c : connections) close(c.fd);
}

}  // namespace ucudnn::server
