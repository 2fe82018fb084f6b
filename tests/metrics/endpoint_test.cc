// The metrics endpoint (ucudnn/metrics/endpoint.h, prometheus-cpp's Exposer): what it answers,
// clean bind errors, and that slow or idle clients cannot starve a scrape.
#include "ucudnn/metrics/endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "ucudnn/metrics/registry.h"

namespace ucudnn::metrics {
namespace {

using namespace std::chrono_literals;

// A registry with one gauge, `up 1`.
std::shared_ptr<prometheus::Registry> UpRegistry() {
  auto registry = std::make_shared<prometheus::Registry>();
  AddGauge(*registry, "up", "Up.").Add({}).Set(1);
  return registry;
}
constexpr const char* kUpText = "# HELP up Up.\n# TYPE up gauge\nup 1\n";

Result<std::unique_ptr<Endpoint>> StartUp(const std::string& listen = "127.0.0.1:0") {
  return Endpoint::Start(listen, UpRegistry());
}

// A connected TCP client on loopback.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void Send(int fd, const std::string& text) {
  [[maybe_unused]] const ssize_t sent = send(fd, text.data(), text.size(), MSG_NOSIGNAL);
}

// GET /metrics with a client that gives up after 2 s.
bool Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  client.set_read_timeout(2);
  const auto response = client.Get("/metrics");
  return response && response->status == 200 && response->body.find(kUpText) != std::string::npos;
}

TEST(MetricsEndpointTest, ServesGetOfMetricsAndRefusesTheRest) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const int port = (*endpoint)->port();
  ASSERT_GT(port, 0);
  httplib::Client client("127.0.0.1", port);
  const auto get = client.Get("/metrics");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  EXPECT_EQ(get->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  EXPECT_NE(get->body.find(kUpText), std::string::npos) << get->body;
  const auto query = client.Get("/metrics?x=1");
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 200);
  const auto other = client.Get("/other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  const auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_GE(post->status, 400);
  EXPECT_EQ(post->body.find("up 1"), std::string::npos);
}

TEST(MetricsEndpointTest, BindFailuresAreCleanErrors) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  EXPECT_TRUE(Scrape((*endpoint)->port()));
  // A second server on the same port fails, and the first one keeps serving.
  auto second = StartUp("127.0.0.1:" + std::to_string((*endpoint)->port()));
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("cannot listen on 127.0.0.1:"), std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(Scrape((*endpoint)->port()));
  // Not a local address.
  EXPECT_EQ(StartUp("192.0.2.1:0").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StartUp("no-port").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StartUp("127.0.0.1:99999").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StartUp("[::1]:0").status().code(), StatusCode::kInvalidArgument);
}

// Promptly: CivetWeb's own stop waits up to 2 s for its accepting thread's poll.
TEST(MetricsEndpointTest, StopClosesThePortPromptly) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const int port = (*endpoint)->port();
  EXPECT_TRUE(Scrape(port));
  std::this_thread::sleep_for(100ms);  // the accepting thread is back in its poll
  const auto start = std::chrono::steady_clock::now();
  (*endpoint)->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  EXPECT_FALSE(Scrape(port));
  (*endpoint)->Stop();  // idempotent
}

TEST(MetricsEndpointTest, SplitHostPort) {
  EXPECT_EQ(*SplitHostPort("127.0.0.1:9464"), std::make_pair(std::string("127.0.0.1"), 9464));
  EXPECT_EQ(*SplitHostPort("[::1]:80"), std::make_pair(std::string("::1"), 80));
  EXPECT_FALSE(SplitHostPort(":80").ok());
  EXPECT_FALSE(SplitHostPort("host:").ok());
  EXPECT_FALSE(SplitHostPort("host:-1").ok());
}

// `count` connections that trickle a request that never ends: a header line every 100 ms, each
// within any per-read timeout, until destroyed.
class SlowClients {
 public:
  SlowClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = Connect(port);
      if (fd < 0) continue;
      Send(fd, "GET /metrics HTTP/1.1\r\nHost: slow\r\n");
      fds_.push_back(fd);
    }
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        for (int fd : fds_) Send(fd, "X-Slow: 1\r\n");
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  ~SlowClients() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
  }
  size_t connected() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Slow clients and clients that send nothing: a scrape is still answered at once. With a
// per-read timeout and fewer threads than such clients, they held every thread.
TEST(MetricsEndpointTest, SlowAndIdleClientsDoNotStarveAScrape) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const int port = (*endpoint)->port();
  const SlowClients slow(port, 16);
  ASSERT_EQ(slow.connected(), 16u);
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(Connect(port));
  std::this_thread::sleep_for(300ms);  // every slow client is in
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Scrape(port)) << "scrape " << i;
  for (int fd : idle) close(fd);
}

// More slow clients than the endpoint has threads: each loses its connection kRequestTimeoutMs
// after a thread took it, so a scrape behind 200 of them is answered within 2 s.
TEST(MetricsEndpointTest, MoreSlowClientsThanThreadsDoNotStarveAScrape) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const SlowClients slow((*endpoint)->port(), 200);
  ASSERT_EQ(slow.connected(), 200u);
  EXPECT_TRUE(Scrape((*endpoint)->port()));
}

// More idle connections than the endpoint has threads.
TEST(MetricsEndpointTest, AFloodOfIdleConnectionsDoesNotStarveAScrape) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(Connect((*endpoint)->port()));
  EXPECT_TRUE(Scrape((*endpoint)->port()));
  for (int fd : idle) close(fd);
}

TEST(MetricsEndpointTest, AnOversizedRequestIsRefused) {
  auto endpoint = StartUp();
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().ToString();
  const int fd = Connect((*endpoint)->port());
  ASSERT_GE(fd, 0);
  // Past kMaxRequestBytes, within CivetWeb's default (16 KiB).
  Send(fd, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(12000, 'a'));
  std::string answer;
  char buffer[4096];
  timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  close(fd);
  // Refused at max_request_size (CivetWeb 1.15 answers 400 "Malformed message").
  EXPECT_TRUE(std::regex_search(answer, std::regex("^HTTP/1\\.[01] 4[0-9][0-9] ")))
      << answer.substr(0, 100);
  EXPECT_EQ(answer.find("up 1"), std::string::npos);
}

}  // namespace
}  // namespace ucudnn::metrics
