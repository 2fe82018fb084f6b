#include "ucudnn/server/metrics_http.h"

#include <sys/socket.h>

#include <charconv>

#include <httplib.h>
#include <spdlog/spdlog.h>

namespace ucudnn::server {
namespace {

// Not kUnavailable: the caller does not retry an address that another process holds.
Status CannotBind(const std::string& listen) {
  return FailedPrecondition("metrics: cannot listen on " + listen +
                            " (address in use by another process, or not local)");
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

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, std::function<std::string()> render) {
  UCUDNN_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(listen));
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->http_ = std::make_unique<httplib::Server>();
  // Scrapes are rare; two threads are plenty and keep the planner's cores for planning.
  // httplib's default sets SO_REUSEPORT, which lets a second server share the port; only
  // SO_REUSEADDR (a restart may bind while old connections linger in TIME_WAIT).
  server->http_->set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->http_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  server->http_->Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                              httplib::Response& response) {
    response.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server->http_->Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ucudnn-server: metrics at /metrics\n", "text/plain");
  });
  const auto& [host, port] = host_port;
  if (port == 0) {
    server->port_ = server->http_->bind_to_any_port(host);
    if (server->port_ <= 0) return CannotBind(listen);
  } else {
    if (!server->http_->bind_to_port(host, port)) {
      return CannotBind(listen);
    }
    server->port_ = port;
  }
  server->thread_ = std::thread([http = server->http_.get()] { http->listen_after_bind(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ucudnn::server
