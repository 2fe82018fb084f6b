// The `ucudnn` commands. Each returns the process exit status (0 ok, 1 failure, 2 usage) and
// prints errors to stderr as sentences.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "grpc_client.h"

namespace ucudnn::cli {

// Prints "ucudnn: STATUS" to stderr; returns 1.
int Fail(const Status& status);

// Which kernels a command works on: a built-in network or a user's network file.
struct NetworkOptions {
  std::string network = "resnet50";  // built-in name, or a path to a network CSV
  int64_t batch = 256;
  std::string dtype = "fp32";  // fp32 | fp16 | bf16
  std::string layout = "";     // nchw | nhwc; default nchw for fp32, nhwc otherwise
  std::string math = "";       // default | tensor_op | ...; default by dtype (DefaultMath)
};

// ---- Local (no server, no database) ----
int RunNetworks(bool json);
int RunProblem(const NetworkOptions& net, bool unique_only, bool json);
int RunGpus(bool json);
struct CpuBenchOptions {
  NetworkOptions net;
  std::string policy = "power_of_two";
  std::string workspace = "64MiB";
  std::string output_csv;  // also write the timings here (timing CSV format)
  int threads = 1;
};
int RunCpuBench(const CpuBenchOptions& options);

// ---- Database ----
// `to_version` > 0: stop after that schema version (Store::Migrate's up_to).
int RunMigrate(const std::string& database_url, int to_version);
int RunImport(const std::string& database_url, const std::string& file);

// ---- Server ----
int RunHealth(const ServerOptions& server, bool json);
// With `json`, the read commands print the server's answer as one JSON document instead of a
// table (protobuf's JSON mapping, field names as in the .proto).
int RunDevices(const ServerOptions& server, bool json);
int RunWorkers(const ServerOptions& server, bool alive_only, bool json);
int RunJobs(const ServerOptions& server, const std::string& state, int limit, bool json);
// Re-queues a failed job (CatalogService.RetryJob; needs the token).
int RunRetryJob(const ServerOptions& server, int64_t job_id);
// Takes queued jobs out of the queue (CatalogService.CancelJobs; needs the token): job `job_id`
// when given, else every queued job, of `device` only when set (a hash prefix or an index of
// `ucudnn devices`).
int RunCancelJobs(const ServerOptions& server, std::optional<int64_t> job_id,
                  const std::string& device, bool json);
struct PlanOptions {
  NetworkOptions net;
  std::string backend = "auto";  // the local device: auto | cpu | cudnn
  std::string device;            // or a device of the catalog: hash prefix or index
  std::string policy = "power_of_two";
  std::string workspace = "64MiB";
  std::string mode = "per_kernel";  // per_kernel | total (= total_shared) | total_sum
  std::string wait = "0";           // how long to wait for benchmarks ("10m")
  std::string algorithms = "all";   // all | legacy | engines
  bool json = false;
  // timings: only the configurations blocked for a wrong result (result_check.h) on the device.
  bool wrong_results = false;
};
int RunPlan(const ServerOptions& server, const PlanOptions& options);
// The plan table, then each kernel's Pareto front with the chosen configuration marked and why
// it won (JSON: {"plan": ..., "kernels": [{"name", "alternatives": [...]}]}).
int RunExplain(const ServerOptions& server, const PlanOptions& options);
// Every stored timing of the network's distinct problems; says so when there is none (JSON:
// {"device_hash", "problems": [{"kernel", "problem_hash", "timings": [...]}]}). With
// wrong_results, only the configurations blocked on the device for computing a wrong result,
// with why.
int RunTimings(const ServerOptions& server, const PlanOptions& options);
// Predicted step time against the workspace limit (one GetPlan per limit of CurveLimits(max)),
// as a table or JSON, and drawn into `svg` when set.
struct CurveOptions {
  PlanOptions plan;
  std::string max_workspace = "4GiB";
  std::string svg;  // write the picture here
};
int RunCurve(const ServerOptions& server, const CurveOptions& options);

}  // namespace ucudnn::cli
