// ucudnn-bench-server: GetPlan latency and throughput of the planner server on loopback.
//
// Starts a throw-away PostgreSQL (unless --database-url), seeds the measured H100 ResNet-50
// timings, starts the server in-process on an ephemeral port and measures, with real gRPC clients:
//   cached:   the same ResNet-50 request from --clients concurrent clients (plan cache hit);
//   uncached: requests that miss every cache (a new workspace budget each time, timing tables read
//             from the database, plan computed and written to the plan cache), one at a time;
//   uncached_warm_timings: the same with the timing tables already in the server's memory;
//   uncached_first_3: the first three uncached requests of a fresh server (connections opening),
//             kept out of the steady-state numbers above.
// Prints a summary, or JSON with --json.
#include <absl/synchronization/mutex.h>
#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/postgres_fixture.h"
#include "ucudnn/core/logging.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/proto_convert.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/server/server.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ucudnn;

struct Options {
  std::string database_url;
  std::string timings_csv =
      std::string(UCUDNN_SOURCE_DIR) + "/data/h100/h100-cudnn91400-resnet50-fp32-nchw.csv";
  int clients = 8;
  double cached_seconds = 5;
  int uncached_requests = 30;
  bool json = false;
};

void Usage() {
  std::puts(
      "Usage: ucudnn-bench-server [--json] [--clients N] [--seconds S] [--uncached N]\n"
      "                           [--database-url URL] [--timings CSV]\n"
      "  --json            print the results as JSON\n"
      "  --clients N       concurrent clients of the cached run (default 8)\n"
      "  --seconds S       duration of the cached run (default 5)\n"
      "  --uncached N      requests of each uncached run (default 30)\n"
      "  --database-url    use this PostgreSQL (migrated and seeded) instead of a throw-away one\n"
      "  --timings CSV     timing table to seed (default: data/h100/ ResNet-50 fp32)");
}

DeviceFingerprint H100() {
  DeviceFingerprint f;
  f.backend = "cudnn";
  f.name = "NVIDIA H100 80GB HBM3";
  f.cc_major = 9;
  f.cc_minor = 0;
  f.sm_count = 132;
  f.memory_bytes = 85045379072ull;
  f.cudnn_version = 91400;
  f.cuda_runtime_version = 13000;
  return f;
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
  auto at = [&](double q) {
    const size_t index = std::min(
        latencies_ms.size() - 1, static_cast<size_t>(q * static_cast<double>(latencies_ms.size())));
    return latencies_ms[index];
  };
  s.median_ms = at(0.5);
  s.p99_ms = at(0.99);
  s.max_ms = latencies_ms.back();
  double sum = 0;
  for (double v : latencies_ms) sum += v;
  s.mean_ms = sum / static_cast<double>(latencies_ms.size());
  return s;
}

std::string StatsJson(const Stats& s, bool with_rate) {
  char buffer[512];
  std::snprintf(
      buffer, sizeof(buffer),
      "{\"requests\": %zu, \"seconds\": %.3f, \"median_ms\": %.3f, \"p99_ms\": %.3f, "
      "\"max_ms\": %.3f, \"mean_ms\": %.3f, \"errors\": %zu, \"from_cache\": %zu%s}",
      s.requests, s.seconds, s.median_ms, s.p99_ms, s.max_ms, s.mean_ms, s.errors, s.from_cache,
      with_rate
          ? (", \"plans_per_s\": " + std::to_string(static_cast<double>(s.requests) / s.seconds))
                .c_str()
          : "");
  return buffer;
}

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
  config.timings_cache_entries = timings_cache_entries;
  return server::PlannerServer::Start(config);
}

int Main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--clients") {
      options.clients = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--seconds") {
      options.cached_seconds = std::max(0.1, std::atof(value().c_str()));
    } else if (arg == "--uncached") {
      options.uncached_requests = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--database-url") {
      options.database_url = value();
    } else if (arg == "--timings") {
      options.timings_csv = value();
    } else if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      Usage();
      return 2;
    }
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

  // Seed the timings.
  auto tables = ReadTimingCsvFile(options.timings_csv);
  if (!tables.ok()) {
    std::fprintf(stderr, "%s\n", tables.status().ToString().c_str());
    return 1;
  }
  {
    auto store = store::Store::Open(url);
    if (!store.ok() || !(*store)->Migrate().ok()) {
      std::fprintf(stderr, "cannot open or migrate the database\n");
      return 1;
    }
    std::vector<store::ProblemTimings> problems;
    for (const auto& [key, t] : *tables) problems.push_back({t.problem, t.table.entries});
    auto written = (*store)->ImportTimings(H100(), problems, "import:bench");
    if (!written.ok()) {
      std::fprintf(stderr, "seeding: %s\n", written.status().ToString().c_str());
      return 1;
    }
  }

  auto kernels = NetworkKernels("resnet50", 256);
  if (!kernels.ok()) return 1;
  PlanRequest plan_request;
  plan_request.device = H100();
  plan_request.kernels = *kernels;
  plan_request.workspace_bytes = 64ull << 20;
  const v1::GetPlanRequest request = ToProto(plan_request);
  size_t problems = 0;
  {
    std::set<uint64_t> distinct;
    for (const auto& k : *kernels) distinct.insert(StableHash(k.problem));
    problems = distinct.size();
  }

  // Uncached with every table read from the database: a server without a timings cache.
  Stats uncached;
  Stats first_uncached;
  {
    auto server = StartServer(url, 0);
    if (!server.ok()) {
      std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
      return 1;
    }
    // The first requests also open pooled connections and warm PostgreSQL's per-backend caches;
    // they are reported apart from the steady state.
    first_uncached = RunUncached((*server)->port(), request, 3, 1u << 20);
    uncached = RunUncached((*server)->port(), request, options.uncached_requests, 1);
    (*server)->Shutdown(std::chrono::seconds(5));
  }
  // The production configuration: both in-process caches on.
  auto server = StartServer(url, 8192);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const int port = (*server)->port();
  // Wait until the timing notifications are live (the timings cache is bypassed until then).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  RunUncached(port, request, 1, 1u << 30);  // warms the timings cache
  const Stats uncached_warm = RunUncached(port, request, options.uncached_requests, 1u << 31);
  // The plan cache: compute once, then hammer.
  RunUncached(port, request, 1, 0);
  size_t response_bytes = 0;
  {
    auto stub = v1::PlannerService::NewStub(NewChannel(port, 999));
    bool from_cache = false;
    Call(*stub, request, &from_cache, &response_bytes);
  }
  const Stats cached = RunCached(port, request, options.clients, options.cached_seconds);
  (*server)->Shutdown(std::chrono::seconds(5));

  const double plans_per_s = static_cast<double>(cached.requests) / cached.seconds;
  if (options.json) {
    std::printf(
        "{\n  \"benchmark\": \"server_get_plan\",\n  \"network\": \"resnet50\",\n"
        "  \"kernels\": %zu,\n  \"problems\": %zu,\n  \"request_bytes\": %zu,\n"
        "  \"response_bytes\": %zu,\n  \"hardware_threads\": %u,\n"
        "  \"cached\": %s,\n  \"clients\": %d,\n  \"uncached\": %s,\n"
        "  \"uncached_warm_timings\": %s,\n  \"uncached_first_3\": %s,\n"
        "  \"targets\": {\"cached_p99_ms\": 5, \"cached_plans_per_s\": 2000, "
        "\"uncached_ms\": 50},\n"
        "  \"met\": {\"cached_p99\": %s, \"cached_rate\": %s, \"uncached_p99\": %s}\n}\n",
        kernels->size(), problems, request.ByteSizeLong(), response_bytes,
        std::thread::hardware_concurrency(), StatsJson(cached, true).c_str(), options.clients,
        StatsJson(uncached, false).c_str(), StatsJson(uncached_warm, false).c_str(),
        StatsJson(first_uncached, false).c_str(), cached.p99_ms < 5 ? "true" : "false",
        plans_per_s > 2000 ? "true" : "false", uncached.p99_ms < 50 ? "true" : "false");
  } else {
    std::printf(
        "ResNet-50: %zu kernels, %zu problems, request %zu B, plan response %zu B, "
        "%u hardware threads\n",
        kernels->size(), problems, request.ByteSizeLong(), response_bytes,
        std::thread::hardware_concurrency());
    std::printf("cached   (%d clients): %.0f plans/s, median %.3f ms, p99 %.3f ms (%zu requests)\n",
                options.clients, plans_per_s, cached.median_ms, cached.p99_ms, cached.requests);
    std::printf("uncached (timings from DB): median %.3f ms, p99 %.3f ms\n", uncached.median_ms,
                uncached.p99_ms);
    std::printf("uncached (timings in memory): median %.3f ms, p99 %.3f ms\n",
                uncached_warm.median_ms, uncached_warm.p99_ms);
  }
  return cached.errors + uncached.errors + uncached_warm.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
