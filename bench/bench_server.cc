// ucudnn-bench-server: the planner server on loopback, measured with real gRPC clients against a
// throw-away PostgreSQL (unless --database-url). Two benchmarks:
//
// Latency (the default): seeds the measured H100 ResNet-50 timings, starts the server in-process
// on an ephemeral port and measures
//   cached:   the same ResNet-50 request from --clients concurrent clients (plan cache hit);
//   uncached: requests that miss every cache (a new workspace budget each time, timing tables read
//             from the database, plan computed and written to the plan cache), one at a time;
//   uncached_warm_timings: the same with the timing tables already in the server's memory;
//   uncached_first_3: the first three uncached requests of a fresh server (connections opening),
//             kept out of the steady-state numbers above.
//
// Load (--load N): the ucudnn-server binary as a child process, and N concurrent GetPlan calls for
// a network nobody measured, each willing to wait --max-wait-ms for the benchmarks (no worker
// runs, so every call waits its whole budget and answers with a partial plan). Reports the
// server's threads and resident memory (idle and peak, from /proc), each call's answer time
// against its max_wait_ms (p50, p99, max, and the calls later than max_wait_ms + 100 ms), the
// errors by status code, and how long a /metrics scrape took meanwhile while
// --slow-metrics-clients connections trickle an unfinished request at the metrics port.
//
// Prints a summary, or JSON with --json.
#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <google/protobuf/arena.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/devices.h"
#include "support/postgres_fixture.h"
#include "support/process_usage.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/server.h"
#include "ucudnn/store/import.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace ucudnn;
using test_support::ProcessUsage;
using test_support::ReadProcessUsage;

// The bearer token (role admin) of the benchmarked servers: a caller without one may not write
// the plan cache or enqueue benchmarks.
constexpr const char* kToken = "bench-server-token";

struct Options {
  std::string database_url;
  std::string timings_csv =
      std::string(UCUDNN_SOURCE_DIR) + "/data/h100/h100-cudnn91400-resnet50-fp32-nchw.csv";
  int clients = 8;
  double cached_seconds = 5;
  int uncached_requests = 30;
  bool json = false;
  // --load
  int load_calls = 0;  // 0: the latency benchmark
  std::string load_network = "resnet50";
  int load_batch = 256;
  uint32_t max_wait_ms = 8000;
  int connections = 32;
  int slow_metrics_clients = 8;
  std::string server_binary;
};

// Parses the command line into `options`; an exit code when the program should exit (--help, or
// a bad flag, with CLI11's message).
std::optional<int> ParseOptions(int argc, char** argv, Options& options) {
  CLI::App app{
      "GetPlan latency and throughput of the planner server on loopback, or (--load) N "
      "concurrent waiting calls: threads, memory and answer times against max_wait_ms."};
  app.add_flag("--json", options.json, "print the results as JSON");
  app.add_option("--clients", options.clients, "concurrent clients of the cached run")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--seconds", options.cached_seconds, "duration of the cached run")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--uncached", options.uncached_requests, "requests of each uncached run")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--database-url", options.database_url,
                 "use this PostgreSQL (migrated and seeded) instead of a throw-away one");
  app.add_option("--timings", options.timings_csv, "timing table to seed")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  app.add_option("--load", options.load_calls,
                 "instead of the latency benchmark: this many concurrent GetPlan calls that wait "
                 "for benchmarks that never come")
      ->check(CLI::Range(1, 100000));
  app.add_option("--network", options.load_network,
                 "network of the --load calls (an embedded name or a CSV file)")
      ->capture_default_str();
  app.add_option("--batch", options.load_batch, "mini-batch of the --load calls")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--max-wait-ms", options.max_wait_ms, "max_wait_ms of each --load call")
      ->check(CLI::Range(0, 600000))
      ->capture_default_str();
  app.add_option("--connections", options.connections,
                 "gRPC connections the --load calls are spread over (one per training process)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--slow-metrics-clients", options.slow_metrics_clients,
                 "connections holding the metrics port with an unfinished request during --load")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--server-binary", options.server_binary,
                 "the ucudnn-server of --load (default: the one beside this program)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// ---- Statistics --------------------------------------------------------------------------------

// The value at quantile q of sorted `values` (0 when empty).
double Quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t index =
      std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[index];
}

struct Stats {
  size_t requests = 0;
  double seconds = 0;
  double median_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  double mean_ms = 0;
  size_t errors = 0;
  size_t from_cache = 0;
};

Stats Summarise(std::vector<double> latencies_ms, double seconds, size_t errors,
                size_t from_cache) {
  Stats s;
  s.requests = latencies_ms.size();
  s.seconds = seconds;
  s.errors = errors;
  s.from_cache = from_cache;
  if (latencies_ms.empty()) return s;
  std::sort(latencies_ms.begin(), latencies_ms.end());
  s.median_ms = Quantile(latencies_ms, 0.5);
  s.p99_ms = Quantile(latencies_ms, 0.99);
  s.max_ms = latencies_ms.back();
  double sum = 0;
  for (double v : latencies_ms) sum += v;
  s.mean_ms = sum / static_cast<double>(latencies_ms.size());
  return s;
}

json ToJson(const Stats& s, bool with_rate) {
  json out = {{"requests", s.requests}, {"seconds", s.seconds},      {"median_ms", s.median_ms},
              {"p99_ms", s.p99_ms},     {"max_ms", s.max_ms},        {"mean_ms", s.mean_ms},
              {"errors", s.errors},     {"from_cache", s.from_cache}};
  if (with_rate) out["plans_per_s"] = static_cast<double>(s.requests) / s.seconds;
  return out;
}

// ---- Latency benchmark -------------------------------------------------------------------------

std::shared_ptr<grpc::Channel> NewChannel(int port, int index) {
  grpc::ChannelArguments args;
  // A connection per client, as separate training processes would have.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("ucudnn.bench.client", index);
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

bool Call(v1::PlannerService::Stub& stub, const v1::GetPlanRequest& request, bool* from_cache,
          size_t* response_bytes = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  context.AddMetadata("authorization", std::string("Bearer ") + kToken);
  // The response lives in an arena on a reused block, as a client that asks often would keep it:
  // parsing a plan of a thousand small messages then costs no malloc.
  thread_local std::vector<char> block(1 << 20);
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = block.data();
  arena_options.initial_block_size = block.size();
  google::protobuf::Arena arena(arena_options);
  auto& response = *google::protobuf::Arena::CreateMessage<v1::GetPlanResponse>(&arena);
  const grpc::Status status = stub.GetPlan(&context, request, &response);
  if (response_bytes != nullptr) *response_bytes = response.ByteSizeLong();
  if (!status.ok()) {
    spdlog::error("GetPlan: {} {}", static_cast<int>(status.error_code()), status.error_message());
    return false;
  }
  if (response.plan().status() != v1::PLAN_STATUS_COMPLETE) {
    spdlog::error("GetPlan: plan not complete ({} missing)", response.plan().missing_size());
    return false;
  }
  *from_cache = response.from_cache();
  return true;
}

// One client, sequential requests, each with a workspace budget never asked before.
Stats RunUncached(int port, const v1::GetPlanRequest& base, int requests, uint64_t salt) {
  auto stub = v1::PlannerService::NewStub(NewChannel(port, 1000));
  std::vector<double> latencies;
  size_t errors = 0;
  size_t cached = 0;
  const auto start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    v1::GetPlanRequest request = base;
    request.set_workspace_bytes(base.workspace_bytes() + salt + static_cast<uint64_t>(i) * 4096);
    const auto t0 = Clock::now();
    bool from_cache = false;
    if (!Call(*stub, request, &from_cache)) {
      ++errors;
      continue;
    }
    latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    cached += from_cache ? 1 : 0;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return Summarise(std::move(latencies), seconds, errors, cached);
}

Stats RunCached(int port, const v1::GetPlanRequest& request, int clients, double seconds) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<size_t> errors{0};
  std::atomic<size_t> cached{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = v1::PlannerService::NewStub(NewChannel(port, c));
      while (!stop.load(std::memory_order_relaxed)) {
        const auto t0 = Clock::now();
        bool from_cache = false;
        if (!Call(*stub, request, &from_cache)) {
          ++errors;
          continue;
        }
        latencies[static_cast<size_t>(c)].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (from_cache) ++cached;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  return Summarise(std::move(all), elapsed, errors.load(), cached.load());
}

Result<std::unique_ptr<server::PlannerServer>> StartServer(const std::string& url,
                                                           int timings_cache_entries) {
  server::ServerConfig config;
  config.database_url = url;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.tokens = {kToken};
  config.timings_cache_entries = timings_cache_entries;
  return server::PlannerServer::Start(config);
}

// Writes the timing tables of `csv` into the database at `url` for the H100.
Status SeedTimings(const std::string& url, const std::string& csv) {
  UCUDNN_ASSIGN_OR_RETURN(auto store, store::Store::Open(url));
  UCUDNN_RETURN_IF_ERROR(store->Migrate().status());
  return store::ImportTimingsFileWithSummary(*store, csv, test_support::H100()).status();
}

// ResNet-50 at mini-batch 256 on the H100 with a 64 MiB workspace per kernel.
Result<std::vector<Kernel>> ResNet50() { return NetworkKernels("resnet50", 256); }

v1::GetPlanRequest RequestFor(const std::vector<Kernel>& kernels, uint32_t max_wait_ms = 0) {
  PlanRequest plan_request;
  plan_request.device = test_support::H100();
  plan_request.kernels = kernels;
  plan_request.workspace_bytes = 64ull << 20;
  v1::GetPlanRequest request = ToProto(plan_request);
  request.set_max_wait_ms(max_wait_ms);
  return request;
}

size_t DistinctProblems(const std::vector<Kernel>& kernels) {
  std::set<uint64_t> distinct;
  for (const auto& k : kernels) distinct.insert(StableHash(k.problem));
  return distinct.size();
}

struct LatencyResults {
  Stats cached, uncached, uncached_warm, first_uncached;
  size_t response_bytes = 0;
};

// The four runs of the latency benchmark against `url` (seeded).
Result<LatencyResults> MeasureLatency(const std::string& url, const v1::GetPlanRequest& request,
                                      const Options& options) {
  LatencyResults r;
  {
    // Uncached with every table read from the database: a server without a timings cache.
    UCUDNN_ASSIGN_OR_RETURN(auto server, StartServer(url, 0));
    // The first requests also open pooled connections and warm PostgreSQL's per-backend caches;
    // they are reported apart from the steady state.
    r.first_uncached = RunUncached(server->port(), request, 3, 1u << 20);
    r.uncached = RunUncached(server->port(), request, options.uncached_requests, 1);
    server->Shutdown(std::chrono::seconds(5));
  }
  // The production configuration: both in-process caches on.
  UCUDNN_ASSIGN_OR_RETURN(auto server, StartServer(url, 8192));
  const int port = server->port();
  // Wait until the timing notifications are live (the timings cache is bypassed until then).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  RunUncached(port, request, 1, 1u << 30);  // warms the timings cache
  r.uncached_warm = RunUncached(port, request, options.uncached_requests, 1u << 31);
  // The plan cache: compute once, then hammer.
  RunUncached(port, request, 1, 0);
  {
    auto stub = v1::PlannerService::NewStub(NewChannel(port, 999));
    bool from_cache = false;
    Call(*stub, request, &from_cache, &r.response_bytes);
  }
  r.cached = RunCached(port, request, options.clients, options.cached_seconds);
  server->Shutdown(std::chrono::seconds(5));
  return r;
}

// Runs the latency benchmark; the exit code.
int RunLatencyBenchmark(const std::string& url, const Options& options) {
  if (Status seeded = SeedTimings(url, options.timings_csv); !seeded.ok()) {
    std::fprintf(stderr, "seeding: %s\n", seeded.ToString().c_str());
    return 1;
  }
  auto kernels = ResNet50();
  if (!kernels.ok()) return 1;
  const v1::GetPlanRequest request = RequestFor(*kernels);
  auto measured = MeasureLatency(url, request, options);
  if (!measured.ok()) {
    std::fprintf(stderr, "server: %s\n", measured.status().ToString().c_str());
    return 1;
  }
  const LatencyResults& r = *measured;
  const double plans_per_s = static_cast<double>(r.cached.requests) / r.cached.seconds;
  if (options.json) {
    const json out = {
        {"benchmark", "server_get_plan"},
        {"network", "resnet50"},
        {"kernels", kernels->size()},
        {"problems", DistinctProblems(*kernels)},
        {"request_bytes", request.ByteSizeLong()},
        {"response_bytes", r.response_bytes},
        {"hardware_threads", std::thread::hardware_concurrency()},
        {"cached", ToJson(r.cached, true)},
        {"clients", options.clients},
        {"uncached", ToJson(r.uncached, false)},
        {"uncached_warm_timings", ToJson(r.uncached_warm, false)},
        {"uncached_first_3", ToJson(r.first_uncached, false)},
        {"targets", {{"cached_p99_ms", 5}, {"cached_plans_per_s", 2000}, {"uncached_ms", 50}}},
        {"met",
         {{"cached_p99", r.cached.p99_ms < 5},
          {"cached_rate", plans_per_s > 2000},
          {"uncached_p99", r.uncached.p99_ms < 50}}}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "ResNet-50: %zu kernels, %zu problems, request %zu B, plan response %zu B, "
        "%u hardware threads\n",
        kernels->size(), DistinctProblems(*kernels), request.ByteSizeLong(), r.response_bytes,
        std::thread::hardware_concurrency());
    std::printf("cached   (%d clients): %.0f plans/s, median %.3f ms, p99 %.3f ms (%zu requests)\n",
                options.clients, plans_per_s, r.cached.median_ms, r.cached.p99_ms,
                r.cached.requests);
    std::printf("uncached (timings from DB): median %.3f ms, p99 %.3f ms\n", r.uncached.median_ms,
                r.uncached.p99_ms);
    std::printf("uncached (timings in memory): median %.3f ms, p99 %.3f ms\n",
                r.uncached_warm.median_ms, r.uncached_warm.p99_ms);
  }
  return r.cached.errors + r.uncached.errors + r.uncached_warm.errors == 0 ? 0 : 1;
}

// ---- Load benchmark ----------------------------------------------------------------------------

// ucudnn-server as a child process (killed with this one), its log in a temporary file.
class ServerChild {
 public:
  static Result<std::unique_ptr<ServerChild>> Start(const std::string& binary,
                                                    const std::string& url) {
    std::unique_ptr<ServerChild> child(new ServerChild());
    const std::string dir = std::filesystem::temp_directory_path().string();
    child->log_ = dir + "/ucudnn-bench-server-" + std::to_string(getpid()) + ".log";
    child->token_file_ = dir + "/ucudnn-bench-server-" + std::to_string(getpid()) + ".token";
    { std::ofstream(child->token_file_) << kToken << "\n"; }
    const std::vector<std::string> args = {binary,
                                           "--listen",
                                           "127.0.0.1:0",
                                           "--database-url",
                                           url,
                                           "--metrics-listen",
                                           "127.0.0.1:0",
                                           "--token-file",
                                           child->token_file_,
                                           "--log-level",
                                           "info",
                                           "--recheck-interval",
                                           "1s"};
    UCUDNN_RETURN_IF_ERROR(child->Spawn(args));
    UCUDNN_RETURN_IF_ERROR(child->AwaitPorts());
    return child;
  }
  ~ServerChild() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    std::remove(log_.c_str());
    std::remove(token_file_.c_str());
  }

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  ServerChild() = default;

  Status Spawn(const std::vector<std::string>& args) {
    pid_ = fork();
    if (pid_ < 0) return Internal("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return Status::Ok();
  }

  // Reads both ports from the log lines "listening on 127.0.0.1:P" and "metrics at http://...:P".
  Status AwaitPorts() {
    static const std::regex kListening(R"(listening on [0-9.]+:([0-9]+))");
    static const std::regex kMetrics(R"(metrics at http://[0-9.]+:([0-9]+)/metrics)");
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < until) {
      std::stringstream text;
      text << std::ifstream(log_).rdbuf();
      const std::string log = text.str();
      std::smatch grpc_port;
      std::smatch http_port;
      if (std::regex_search(log, grpc_port, kListening) &&
          std::regex_search(log, http_port, kMetrics)) {
        port_ = std::stoi(grpc_port[1].str());
        metrics_port_ = std::stoi(http_port[1].str());
        return Status::Ok();
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return Unavailable("ucudnn-server exited:\n" + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Unavailable("ucudnn-server did not start listening within 30 s");
  }

  pid_t pid_ = -1;
  std::string log_;
  std::string token_file_;
  int port_ = 0;
  int metrics_port_ = 0;
};

// The machine's 1-minute load average: timings taken on a busy machine say so.
double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

// Samples a process's usage every 10 ms on its own thread, keeping the most threads seen.
class UsageSampler {
 public:
  explicit UsageSampler(pid_t pid)
      : pid_(pid), thread_([this] {
          while (!stop_.load()) {
            const int threads = ReadProcessUsage(pid_).threads;
            peak_threads_ = std::max(peak_threads_.load(), threads);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }) {}
  ~UsageSampler() { Stop(); }
  int Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_threads_.load();
  }

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<int> peak_threads_{0};
  std::thread thread_;
};

// Connections that hold the metrics port with a request that never ends: one header line every
// 500 ms, each arriving within any per-read timeout, as a slow (or hostile) client would.
class SlowHttpClients {
 public:
  SlowHttpClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address = {};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        if (fd >= 0) close(fd);
        continue;
      }
      Send(fd, "GET /metrics HTTP/1.1\r\nHost: slow\r\n");
      fds_.push_back(fd);
    }
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        for (int fd : fds_) Send(fd, "X-Slow: 1\r\n");
      }
    });
  }
  ~SlowHttpClients() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : fds_) close(fd);
  }
  int connected() const { return static_cast<int>(fds_.size()); }

 private:
  static void Send(int fd, std::string_view text) {
    [[maybe_unused]] const ssize_t sent = send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  }
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Milliseconds a GET /metrics took, or a negative value when it failed (within 10 s).
double ScrapeMetricsMs(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_read_timeout(10);
  const auto start = Clock::now();
  const auto response = client.Get("/metrics");
  if (!response || response->status != 200) return -1;
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct LoadCall {
  grpc::ClientContext context;
  grpc::ByteBuffer answer;
  v1::GetPlanResponse response;  // parsed from `answer` once every call is answered
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Clock::time_point started;
  double answer_ms = 0;
};

// Starts every call, then waits for every answer; each call's answer time is measured from its
// own start to its bytes' arrival. The answers are parsed afterwards: one client parsing a
// thousand plans one after another would otherwise delay the later answers' times (separate
// training processes parse theirs side by side).
std::vector<std::unique_ptr<LoadCall>> RunLoadCalls(int port, const v1::GetPlanRequest& request,
                                                    const Options& options) {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int c = 0; c < options.connections; ++c) {
    auto channel = NewChannel(port, c);
    // Connected before the clock starts: the server's answers are measured, not handshakes.
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  const std::string bytes = request.SerializeAsString();
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<LoadCall>> calls;
  for (int i = 0; i < options.load_calls; ++i) {
    auto call = std::make_unique<LoadCall>();
    call->context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::milliseconds(options.max_wait_ms) +
                               std::chrono::seconds(60));
    call->context.AddMetadata("authorization", std::string("Bearer ") + kToken);
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer body(&slice, 1);
    call->started = Clock::now();
    call->reader = stubs[static_cast<size_t>(i % options.connections)]->PrepareUnaryCall(
        &call->context, "/ucudnn.v1.PlannerService/GetPlan", body, &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->answer, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  for (size_t answered = 0; answered < calls.size(); ++answered) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    auto* call = static_cast<LoadCall*>(tag);
    call->answer_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - call->started).count();
  }
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  for (auto& call : calls) {
    grpc::Slice slice;
    if (call->status.ok() &&
        (!call->answer.DumpToSingleSlice(&slice).ok() ||
         !call->response.ParseFromArray(slice.begin(), static_cast<int>(slice.size())))) {
      call->status = grpc::Status(grpc::StatusCode::DATA_LOSS, "unreadable GetPlanResponse");
    }
  }
  return calls;
}

json SummariseLoad(const std::vector<std::unique_ptr<LoadCall>>& calls, const Options& options) {
  std::vector<double> answer_ms;
  std::vector<double> waited_ms;
  std::map<std::string, int> errors;
  int late = 0;
  int partial = 0;
  size_t response_bytes = 0;
  for (const auto& call : calls) {
    if (!call->status.ok()) {
      ++errors[std::to_string(static_cast<int>(call->status.error_code())) + " " +
               call->status.error_message().substr(0, 80)];
      continue;
    }
    answer_ms.push_back(call->answer_ms);
    waited_ms.push_back(call->response.waited_ms());
    response_bytes = std::max(response_bytes, call->answer.Length());
    if (call->answer_ms > options.max_wait_ms + 100.0) ++late;
    if (call->response.plan().status() == v1::PLAN_STATUS_PARTIAL) ++partial;
  }
  std::sort(answer_ms.begin(), answer_ms.end());
  std::sort(waited_ms.begin(), waited_ms.end());
  int error_count = 0;
  for (const auto& [what, n] : errors) error_count += n;
  return {{"answered_ok", answer_ms.size()},
          {"response_bytes", response_bytes},
          {"partial_plans", partial},
          {"errors", error_count},
          {"errors_by_status", errors},
          {"answer_ms",
           {{"p50", Quantile(answer_ms, 0.5)},
            {"p99", Quantile(answer_ms, 0.99)},
            {"max", answer_ms.empty() ? 0.0 : answer_ms.back()}}},
          {"waited_ms", {{"p50", Quantile(waited_ms, 0.5)}, {"p99", Quantile(waited_ms, 0.99)}}},
          {"later_than_max_wait_plus_100ms", late}};
}

// Runs the load benchmark; the exit code.
int RunLoadBenchmark(const std::string& url, const Options& options) {
  if (auto migrated = store::Store::Open(url); !migrated.ok() || !(*migrated)->Migrate().ok()) {
    std::fprintf(stderr, "cannot open or migrate the database\n");
    return 1;
  }
  auto server = ServerChild::Start(options.server_binary, url);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto kernels = NetworkKernels(options.load_network, options.load_batch);
  if (!kernels.ok()) {
    std::fprintf(stderr, "--network: %s\n", kernels.status().ToString().c_str());
    return 1;
  }
  // Nobody measured the network in this database and no worker runs: every call enqueues (the
  // first creates the jobs), then waits its whole max_wait_ms.
  const v1::GetPlanRequest request = RequestFor(*kernels, options.max_wait_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the server settles
  const ProcessUsage idle = ReadProcessUsage((*server)->pid());
  UsageSampler sampler((*server)->pid());
  SlowHttpClients slow((*server)->metrics_port(), options.slow_metrics_clients);
  double scrape_ms = 0;
  std::thread scraper([&] {
    // Halfway through the wait, while every call is waiting.
    std::this_thread::sleep_for(std::chrono::milliseconds(options.max_wait_ms / 2));
    scrape_ms = ScrapeMetricsMs((*server)->metrics_port());
  });
  const auto start = Clock::now();
  const auto calls = RunLoadCalls((*server)->port(), request, options);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  scraper.join();
  const int peak_threads = sampler.Stop();
  const ProcessUsage after = ReadProcessUsage((*server)->pid());

  json out = SummariseLoad(calls, options);
  out.update({{"benchmark", "server_load"},
              {"network", options.load_network},
              {"batch", options.load_batch},
              {"calls", options.load_calls},
              {"connections", options.connections},
              {"max_wait_ms", options.max_wait_ms},
              {"kernels", kernels->size()},
              {"problems", DistinctProblems(*kernels)},
              {"seconds", seconds},
              {"hardware_threads", std::thread::hardware_concurrency()},
              {"server_threads", {{"idle", idle.threads}, {"peak", peak_threads}}},
              {"server_rss_mb", {{"idle", idle.rss_mb}, {"peak", after.peak_rss_mb}}},
              {"server_cpu_seconds", after.cpu_seconds - idle.cpu_seconds},
              {"load_average_1m", LoadAverage()},
              {"slow_metrics_clients", slow.connected()},
              {"metrics_scrape_ms", scrape_ms < 0 ? json(nullptr) : json(scrape_ms)}});
  if (options.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf(
        "%d concurrent GetPlan calls, max_wait_ms %u: answered %zu, p50 %.0f ms, p99 %.0f ms, "
        "%d later than max_wait_ms + 100 ms, %d errors\n",
        options.load_calls, options.max_wait_ms, out["answered_ok"].get<size_t>(),
        out["answer_ms"]["p50"].get<double>(), out["answer_ms"]["p99"].get<double>(),
        out["later_than_max_wait_plus_100ms"].get<int>(), out["errors"].get<int>());
    std::printf("server threads %d idle, %d peak; RSS %.0f MB idle, %.0f MB peak\n", idle.threads,
                peak_threads, idle.rss_mb, after.peak_rss_mb);
    std::printf("GET /metrics with %d slow clients: %s\n", slow.connected(),
                scrape_ms < 0 ? "failed (10 s)" : (std::to_string(scrape_ms) + " ms").c_str());
  }
  return out["errors"].get<int>() == 0 ? 0 : 1;
}

// ---- Main --------------------------------------------------------------------------------------

int Main(int argc, char** argv) {
  Options options;
  if (auto exit_code = ParseOptions(argc, argv, options)) return *exit_code;
  if (options.server_binary.empty()) {
    options.server_binary =
        (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "ucudnn-server").string();
  }
  LogToStderr("ucudnn-bench-server");  // stdout is for --json
  spdlog::set_level(spdlog::level::warn);
  // As ucudnn-server's main does: no lock-order checking in gRPC's absl mutexes.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  std::unique_ptr<test_support::PostgresServer> postgres;
  std::string url = options.database_url;
  if (url.empty()) {
    auto launched = test_support::PostgresServer::Launch();
    if (!launched.ok()) {
      std::fprintf(stderr, "cannot start PostgreSQL: %s\n", launched.status().ToString().c_str());
      return 1;
    }
    postgres = std::move(launched).value();
    auto created = postgres->CreateDatabase("bench_server");
    if (!created.ok()) {
      std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
      return 1;
    }
    url = *created;
  }
  return options.load_calls > 0 ? RunLoadBenchmark(url, options)
                                : RunLatencyBenchmark(url, options);
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
