// The planner server assembled: store, notification watcher, caches, services, health,
// reflection and the metrics endpoint. main() and the tests start it the same way.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ucudnn/core/status.h"
#include "ucudnn/server/config.h"

namespace grpc {
class Server;
}

namespace ucudnn::store {
class Store;
}

namespace ucudnn::metrics {
class Endpoint;
}

namespace ucudnn::server {

class ServerMetrics;
class TimingsCache;
class TimingWatcher;
class PlanCoordinator;
class TokenAuthenticator;
class PlannerServiceImpl;
class CatalogServiceImpl;
class TimingServiceImpl;
class ThreadPool;

class PlannerServer {
 public:
  // Opens the database (kUnavailable when unreachable), migrates it unless
  // config.auto_migrate is off (then a schema older than this binary is kFailedPrecondition),
  // binds config.listen (port 0: any free port; see port()) and starts serving.
  // config.tokens must already include the token file's (LoadTokenFile). `schema_behind`, when
  // given, is set when it failed only because that schema is older (see StartRetryDelay).
  static Result<std::unique_ptr<PlannerServer>> Start(const ServerConfig& config,
                                                      bool* schema_behind = nullptr);
  ~PlannerServer();
  PlannerServer(const PlannerServer&) = delete;
  PlannerServer& operator=(const PlannerServer&) = delete;

  int port() const { return port_; }
  // 0 when the metrics endpoint is disabled.
  int metrics_port() const;
  // Health NOT_SERVING, calls waiting for benchmarks answer with what they have, new calls are
  // refused, calls in flight get up to `grace` to finish, then everything stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until Shutdown() finished.
  void Wait();

  // Collects the scrape-time gauges (queue depth, per-device jobs, ...) and renders all metrics:
  // what GET /metrics answers.
  std::string ScrapeMetrics();
  bool database_healthy() const { return database_healthy_.load(); }
  ServerMetrics& metrics() { return *metrics_; }

 private:
  PlannerServer();
  // Start's phases: the store (migrated, or its schema checked), the caches, coordinator and
  // services, the gRPC port, the metrics endpoint.
  Status OpenDatabase(const ServerConfig& config, bool* schema_behind);
  Status MakeServices(const ServerConfig& config);
  Status Listen(const ServerConfig& config);
  Status StartMetricsEndpoint(const ServerConfig& config);
  void HealthLoop(std::chrono::milliseconds interval);
  // Sets the scrape-time gauges from the store and the caches; one scrape at a time, so that
  // concurrent scrapes do not multiply the database's work.
  void RefreshScrapeGauges();
  void SetServing(bool serving);

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<TimingsCache> timings_cache_;
  std::unique_ptr<TimingWatcher> watcher_;
  std::unique_ptr<PlanCoordinator> coordinator_;
  std::unique_ptr<TokenAuthenticator> auth_;
  std::unique_ptr<PlannerServiceImpl> planner_service_;
  std::unique_ptr<CatalogServiceImpl> catalog_service_;
  std::unique_ptr<TimingServiceImpl> timing_service_;
  // Runs every call's work; declared after what its tasks use, so it stops (and joins) first.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<metrics::Endpoint> metrics_endpoint_;
  std::mutex scrape_mu_;
  int port_ = 0;

  std::atomic<bool> database_healthy_{false};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // wakes the health loop and Wait()
  bool shut_down_ = false;
  std::thread health_thread_;
  // Database plan-cache bound (rows per device; 0: unbounded), enforced from the health loop.
  int64_t plan_cache_max_rows_ = 0;
  std::chrono::milliseconds plan_cache_evict_interval_{60000};
  std::chrono::seconds worker_retention_{0};  // 0: worker rows are kept
};

// The services' names, as health checks and reflection list them.
inline constexpr const char* kPlannerServiceName = "ucudnn.v1.PlannerService";
inline constexpr const char* kCatalogServiceName = "ucudnn.v1.CatalogService";
inline constexpr const char* kTimingServiceName = "ucudnn.v1.TimingService";
// A health-check name that is SERVING whenever the process serves, whatever the database does:
// for liveness probes (readiness probes use "" or a service name).
inline constexpr const char* kLivenessServiceName = "liveness";

}  // namespace ucudnn::server
