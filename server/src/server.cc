#include "ucudnn/server/server.h"

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>

#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "grpc/health/v1/health.pb.h"
#include "ucudnn/metrics/endpoint.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/auth.h"
#include "ucudnn/server/malformed_requests.h"
#include "ucudnn/server/plan_coordinator.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/server/services.h"
#include "ucudnn/server/thread_pool.h"
#include "ucudnn/server/timing_watcher.h"
#include "ucudnn/server/timings_cache.h"
#include "ucudnn/store/store.h"

namespace ucudnn::server {
namespace {

// Threads of gRPC's synchronous server (reflection only).
constexpr int kSyncServerThreads = 4;

// gRPC core's own log lines go through spdlog. While the server binds its address, a failure is
// reported by the one clean line of Listen(); core's raw account of it goes to debug.
std::atomic<bool> binding{false};

void GrpcCoreLog(gpr_log_func_args* args) {
  if (args->severity == GPR_LOG_SEVERITY_ERROR && !binding.load()) {
    spdlog::error("grpc: {} ({}:{})", args->message, args->file, args->line);
  } else {
    spdlog::debug("grpc: {} ({}:{})", args->message, args->file, args->line);
  }
}

Result<std::string> ReadFile(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string(flag) + ": cannot open '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const ServerConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  UCUDNN_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls_cert, "--tls-cert"));
  UCUDNN_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls_key, "--tls-key"));
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  return grpc::SslServerCredentials(options);
}

}  // namespace

PlannerServer::PlannerServer() = default;

PlannerServer::~PlannerServer() {
  Shutdown(std::chrono::milliseconds(0));
  Wait();  // a Shutdown begun on another thread (signal) must finish before members go
}

Result<std::unique_ptr<PlannerServer>> PlannerServer::Start(const ServerConfig& config,
                                                            bool* schema_behind) {
  if (schema_behind != nullptr) *schema_behind = false;
  UCUDNN_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<PlannerServer> server(new PlannerServer());
  UCUDNN_RETURN_IF_ERROR(server->OpenDatabase(config, schema_behind));
  UCUDNN_RETURN_IF_ERROR(server->MakeServices(config));
  UCUDNN_RETURN_IF_ERROR(server->Listen(config));
  UCUDNN_RETURN_IF_ERROR(server->StartMetricsEndpoint(config));
  const auto interval = std::chrono::milliseconds(config.health_interval_ms);
  server->plan_cache_max_rows_ = config.plan_cache_max_rows;
  server->worker_retention_ = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::milliseconds(config.worker_retention_ms));
  server->plan_cache_evict_interval_ =
      std::chrono::milliseconds(config.plan_cache_evict_interval_ms);
  server->health_thread_ =
      std::thread([self = server.get(), interval] { self->HealthLoop(interval); });
  return server;
}

Status PlannerServer::OpenDatabase(const ServerConfig& config, bool* schema_behind) {
  store::StoreOptions store_options;
  store_options.url = config.database_url;
  store_options.pool_size = config.db_pool_size;
  store_options.failed_job_cooldown = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::milliseconds(config.failed_job_cooldown_ms));
  UCUDNN_ASSIGN_OR_RETURN(store_, store::Store::Open(store_options));
  if (config.auto_migrate) {
    UCUDNN_ASSIGN_OR_RETURN(auto migration, store_->Migrate());
    if (!migration.applied.empty()) {
      spdlog::info("database migrated from schema {} to {}", migration.from_version,
                   migration.to_version);
    }
  } else {
    UCUDNN_ASSIGN_OR_RETURN(const int version, store_->SchemaVersion());
    if (schema_behind != nullptr) *schema_behind = version < store::Store::LatestSchemaVersion();
    UCUDNN_RETURN_IF_ERROR(store::CheckSchemaVersion(version));
  }
  database_healthy_ = true;
  return Status::Ok();
}

Status PlannerServer::MakeServices(const ServerConfig& config) {
  metrics_ = std::make_unique<ServerMetrics>();
  timings_cache_ =
      std::make_unique<TimingsCache>(static_cast<size_t>(config.timings_cache_entries),
                                     std::chrono::milliseconds(config.timings_cache_ttl_ms));
  watcher_ = std::make_unique<TimingWatcher>(ListenerSourceFactory(config.database_url),
                                             timings_cache_.get());
  watcher_->Start();

  PlanCoordinatorOptions coordinator_options;
  coordinator_options.max_kernels = config.max_kernels;
  coordinator_options.plan_cache_entries = static_cast<size_t>(config.plan_cache_entries);
  coordinator_options.ilp_time_limit = std::chrono::milliseconds(config.ilp_time_limit_ms);
  coordinator_options.recheck_interval = std::chrono::milliseconds(config.recheck_interval_ms);
  coordinator_options.sizes_for_limit = config.sizes_for_limit;
  coordinator_ = std::make_unique<PlanCoordinator>(
      store_.get(), watcher_.get(), timings_cache_.get(), metrics_.get(), coordinator_options);
  UCUDNN_ASSIGN_OR_RETURN(const AnonymousAccess anonymous,
                          ParseAnonymousRole(config.anonymous_role));
  auth_ = std::make_unique<TokenAuthenticator>(
      RoleTokens{config.tokens, config.plan_tokens, config.submit_tokens, config.read_tokens},
      anonymous);
  if (anonymous.allowed && anonymous.registers_devices) {
    spdlog::warn(
        "--anonymous-role open: callers without a token may enqueue benchmarks and "
        "register devices; set plan or read where others can reach this port");
  }
  if (!auth_->has_tokens()) {
    spdlog::warn("no bearer tokens configured: TimingService.SubmitTimings refuses every call{}",
                 MayEnqueue(anonymous.role) && anonymous.allowed
                     ? ""
                     : ", and no plan request enqueues a benchmark (--token-file)");
  }
  pool_ = std::make_unique<ThreadPool>(config.planner_threads, "ucudnn-calls");
  planner_service_ = std::make_unique<PlannerServiceImpl>(
      coordinator_.get(), metrics_.get(), auth_.get(), pool_.get(), config.max_blocking_calls);
  catalog_service_ =
      std::make_unique<CatalogServiceImpl>(store_.get(), coordinator_.get(), metrics_.get(),
                                           pool_.get(), planner_service_->limiter(), auth_.get());
  timing_service_ = std::make_unique<TimingServiceImpl>(store_.get(), auth_.get(), metrics_.get(),
                                                        pool_.get(), timings_cache_.get());
  return Status::Ok();
}

Status PlannerServer::Listen(const ServerConfig& config) {
  UCUDNN_ASSIGN_OR_RETURN(auto credentials, MakeCredentials(config));
  // gRPC's built-in health service does not use the generated health messages, so nothing would
  // link them in; naming the descriptor does, and reflection can then describe the service.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second server on the same address would then share the
  // port with the first instead of failing. Two servers on one address are a mistake.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(config.listen, credentials, &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  // The services are callback services on the pool; only reflection is synchronous, and its
  // threads are bounded here (calls beyond it are RESOURCE_EXHAUSTED).
  grpc::ResourceQuota quota("ucudnn-server");
  quota.SetMaxThreads(kSyncServerThreads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(planner_service_.get());
  builder.RegisterService(catalog_service_.get());
  builder.RegisterService(timing_service_.get());
  RouteProtobufLogsToSpdlog();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeMalformedRequestInterceptorFactory(metrics_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  static std::once_flag log_routed;
  std::call_once(log_routed, [] { gpr_set_log_function(&GrpcCoreLog); });
  binding = true;
  grpc_server_ = builder.BuildAndStart();
  binding = false;
  if (!grpc_server_ || port_ == 0) {
    watcher_->Stop();
    // Not kUnavailable: a taken address is not waited for like a database (see main).
    return FailedPrecondition("cannot listen on " + config.listen +
                              " (address in use by another process, or not local)");
  }
  SetServing(true);
  spdlog::info("ucudnn-server listening on {} ({}), database {}",
               config.listen.substr(0, config.listen.rfind(':') + 1) + std::to_string(port_),
               config.tls_cert.empty() ? "plaintext" : "TLS",
               store::RedactConnectionString(config.database_url));
  return Status::Ok();
}

Status PlannerServer::StartMetricsEndpoint(const ServerConfig& config) {
  if (config.metrics_listen.empty()) return Status::Ok();
  // Each scrape first reads the scrape-time gauges, then collects every family.
  auto endpoint = metrics::Endpoint::Start(config.metrics_listen, metrics::MakeCollectable([this] {
                                             RefreshScrapeGauges();
                                             return metrics_->registry()->Collect();
                                           }));
  if (!endpoint.ok()) {
    Shutdown(std::chrono::milliseconds(0));
    return endpoint.status();
  }
  metrics_endpoint_ = std::move(endpoint).value();
  spdlog::info("metrics at http://{}/metrics",
               config.metrics_listen.substr(0, config.metrics_listen.rfind(':') + 1) +
                   std::to_string(metrics_endpoint_->port()));
  return Status::Ok();
}

int PlannerServer::metrics_port() const {
  return metrics_endpoint_ ? metrics_endpoint_->port() : 0;
}

void PlannerServer::SetServing(bool serving) {
  if (!grpc_server_) return;
  auto* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;
  for (const char* name : {"", kPlannerServiceName, kCatalogServiceName, kTimingServiceName}) {
    health->SetServingStatus(name, serving);
  }
  // Liveness says only that the process answers: a database outage must not get the server
  // restarted (readiness, the other names, takes it out of the load balancer instead).
  health->SetServingStatus(kLivenessServiceName, !stopping_.load());
}

void PlannerServer::HealthLoop(std::chrono::milliseconds interval) {
  // The first eviction soon after start (a restart may follow a flood), then every interval.
  auto next_eviction = std::chrono::steady_clock::now() + interval;
  std::unique_lock lock(mu_);
  while (!shut_down_ && !stopping_) {
    cv_.wait_for(lock, interval, [&] { return shut_down_ || stopping_.load(); });
    if (shut_down_ || stopping_) break;
    lock.unlock();
    if (std::chrono::steady_clock::now() >= next_eviction && !store_->schema_too_new()) {
      next_eviction = std::chrono::steady_clock::now() + plan_cache_evict_interval_;
      if (plan_cache_max_rows_ > 0) {
        auto evicted = store_->EvictPlans(plan_cache_max_rows_);
        if (evicted.ok()) {
          if (*evicted > 0) metrics_->RecordPlansEvicted(*evicted);
        } else {
          spdlog::warn("plan cache eviction failed: {}", evicted.status().ToString());
        }
      }
      if (worker_retention_.count() > 0) {
        auto pruned = store_->PruneWorkers(worker_retention_);
        if (!pruned.ok()) spdlog::warn("pruning workers failed: {}", pruned.status().ToString());
      }
    }
    const Status ping = store_->Ping();
    const bool healthy = ping.ok();
    if (healthy != database_healthy_.exchange(healthy)) {
      if (healthy) {
        spdlog::info("database reachable again: SERVING");
      } else {
        spdlog::error("database unreachable ({}): NOT_SERVING", ping.ToString());
      }
    }
    // A schema migrated past this binary while it runs: the store stops writing (it logs why)
    // and readiness goes NOT_SERVING, until the schema is one this binary knows again.
    const bool was_too_new = store_->schema_too_new();
    if (healthy) (void)store_->RecheckSchema();
    const bool too_new = store_->schema_too_new();
    if (too_new != was_too_new) {
      if (too_new) {
        spdlog::error("database schema newer than this server's: NOT_SERVING (upgrade it)");
      } else {
        spdlog::info("database schema known again: SERVING");
      }
    }
    if (!stopping_) SetServing(healthy && !too_new);
    lock.lock();
  }
}

std::string PlannerServer::ScrapeMetrics() {
  RefreshScrapeGauges();
  return metrics_->Render();
}

void PlannerServer::RefreshScrapeGauges() {
  std::lock_guard lock(scrape_mu_);
  ScrapeSnapshot snapshot;
  snapshot.listener_connected = watcher_ && watcher_->connected();
  snapshot.plan_cache_entries = coordinator_ ? coordinator_->plan_cache_size() : 0;
  snapshot.timings_cache_entries = timings_cache_ ? timings_cache_->size() : 0;
  if (store_) {
    const auto pool = store_->GetPoolStats();
    snapshot.pool_open = pool.open;
    snapshot.pool_in_use = pool.in_use;
    auto depth = store_->QueueDepth();
    auto per_device = store_->JobCountsByDevice();
    snapshot.database_up = depth.ok() && per_device.ok();
    if (snapshot.database_up) {
      snapshot.queue_depth = *depth;
      for (const auto& d : *per_device) {
        snapshot.device_jobs.push_back({HashHex(d.device_hash), d.device_name, d.queued, d.running,
                                        d.done, d.failed, d.expired});
      }
    }
  }
  metrics_->ApplySnapshot(snapshot);
}

void PlannerServer::Shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (shut_down_ || stopping_.exchange(true)) return;
  }
  cv_.notify_all();
  SetServing(false);
  if (coordinator_) coordinator_->StopWaiting();
  if (grpc_server_) grpc_server_->Shutdown(std::chrono::system_clock::now() + grace);
  if (planner_service_) planner_service_->Drain();
  if (pool_) pool_->Stop();
  if (health_thread_.joinable()) health_thread_.join();
  if (watcher_) watcher_->Stop();
  if (metrics_endpoint_) metrics_endpoint_->Stop();
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
  }
  cv_.notify_all();
  if (grpc_server_) spdlog::info("ucudnn-server stopped");
}

void PlannerServer::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return shut_down_; });
}

}  // namespace ucudnn::server
