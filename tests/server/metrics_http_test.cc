// The metrics endpoint: what it answers, and that slow or idle clients cannot starve a scrape.
#include "ucudnn/server/metrics_http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ucudnn::server {
namespace {

using namespace std::chrono_literals;

std::string Render() { return "# TYPE up gauge\nup 1\n"; }

TEST(MetricsHttpTest, AnswersGetAndHeadOfMetricsAndRefusesTheRest) {
  const auto get = MetricsHttpAnswer("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Render);
  EXPECT_EQ(get.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << get;
  EXPECT_NE(get.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(get.find("Content-Length: " + std::to_string(Render().size())), std::string::npos);
  EXPECT_NE(get.find("Connection: close"), std::string::npos);
  EXPECT_EQ(get.substr(get.size() - Render().size()), Render());
  const auto query = MetricsHttpAnswer("GET /metrics?x=1 HTTP/1.0\r\n\r\n", Render);
  EXPECT_EQ(query.rfind("HTTP/1.1 200 OK", 0), 0u);
  const auto head = MetricsHttpAnswer("HEAD /metrics HTTP/1.1\r\n\r\n", Render);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK", 0), 0u);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // headers only
  EXPECT_EQ(MetricsHttpAnswer("GET /other HTTP/1.1\r\n\r\n", Render).rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(MetricsHttpAnswer("POST /metrics HTTP/1.1\r\n\r\n", Render).rfind("HTTP/1.1 405", 0),
            0u);
  EXPECT_EQ(MetricsHttpAnswer("garbage\r\n\r\n", Render).rfind("HTTP/1.1 400", 0), 0u);
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
  return response && response->status == 200 && response->body == Render();
}

TEST(MetricsHttpTest, ServesOverHttp) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", Render);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_TRUE(Scrape((*server)->port()));
  httplib::Client client("127.0.0.1", (*server)->port());
  EXPECT_EQ(client.Get("/nothing-here")->status, 404);
  // A second server on the same port fails.
  auto second = MetricsHttpServer::Start("127.0.0.1:" + std::to_string((*server)->port()), Render);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

// Clients that trickle a request that never ends (a header line every 100 ms, each within any
// per-read timeout) and clients that send nothing: a scrape is still answered at once. With a
// thread per connection from a small pool, they held every thread.
TEST(MetricsHttpTest, SlowAndIdleClientsDoNotStarveAScrape) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", Render);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    Send(fd, "GET /metrics HTTP/1.1\r\nHost: slow\r\n");
    slow.push_back(fd);
  }
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(Connect(port));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop.load()) {
      for (int fd : slow) Send(fd, "X-Slow: 1\r\n");
      std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(300ms);  // every slow client is in
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Scrape(port)) << "scrape " << i;
  stop = true;
  trickle.join();
  for (int fd : slow) close(fd);
  for (int fd : idle) close(fd);
}

// More idle connections than the endpoint keeps: the oldest make way for new ones.
TEST(MetricsHttpTest, AFloodOfIdleConnectionsDoesNotStarveAScrape) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", Render);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(Connect((*server)->port()));
  EXPECT_TRUE(Scrape((*server)->port()));
  for (int fd : idle) close(fd);
}

TEST(MetricsHttpTest, AnOversizedRequestIsRefused) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0", Render);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int fd = Connect((*server)->port());
  ASSERT_GE(fd, 0);
  Send(fd, "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a'));
  std::string answer;
  char buffer[4096];
  timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 100);
}

}  // namespace
}  // namespace ucudnn::server
