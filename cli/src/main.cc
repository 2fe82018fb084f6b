// `ucudnn`: operator and developer commands. Thin: flags are parsed here, the work is done in
// ucudnn_cli_lib.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "commands.h"
#include "ucudnn/core/logging.h"

using namespace ucudnn::cli;

namespace {

void AddNetworkFlags(CLI::App* cmd, NetworkOptions* net) {
  cmd->add_option("--network,-n", net->network,
                  "Built-in network (see `ucudnn networks`) or a network CSV file")
      ->capture_default_str();
  cmd->add_option("--batch,-b", net->batch, "Mini-batch size")->capture_default_str();
  cmd->add_option("--dtype", net->dtype, "Data type: fp32, fp16, bf16")->capture_default_str();
  cmd->add_option("--layout", net->layout,
                  "Layout: nchw, nhwc (default: nchw for fp32, else nhwc)");
  cmd->add_option("--math", net->math,
                  "Math: default, tensor_op, tensor_op_allow_conversion, fma (default: default "
                  "for fp32, else tensor_op; compute is fp32)");
}

void AddServerFlags(CLI::App* cmd, ServerOptions* server) {
  cmd->add_option("--server,-s", server->address, "Planner server address host:port")
      ->envname("UCUDNN_SERVER")
      ->capture_default_str();
  cmd->add_option("--tls-ca", server->tls_ca_file,
                  "Use TLS, verifying the server with this CA file")
      ->envname("UCUDNN_TLS_CA");
  cmd->add_option("--token", server->token, "Bearer token (for writes)")->envname("UCUDNN_TOKEN");
  cmd->add_option("--deadline-ms", server->deadline_ms, "Deadline of each call, milliseconds")
      ->capture_default_str();
}

void AddPlanFlags(CLI::App* cmd, PlanOptions* plan) {
  AddNetworkFlags(cmd, &plan->net);
  cmd->add_option("--backend", plan->backend,
                  "Plan for this machine's device: auto (cudnn if a GPU is here), cpu, cudnn")
      ->capture_default_str();
  cmd->add_option("--device", plan->device,
                  "Plan for a device of the catalog instead: its hash (prefix) or its index in "
                  "`ucudnn devices`");
  cmd->add_option("--policy", plan->policy, "Micro-batch sizes: undivided, power_of_two, all")
      ->capture_default_str();
  cmd->add_option("--workspace,-w", plan->workspace, "Workspace limit (per kernel) or budget")
      ->capture_default_str();
  cmd->add_option("--algorithms", plan->algorithms,
                  "Candidates: all (legacy algorithms and cuDNN graph-API engine "
                  "configurations), legacy, engines")
      ->capture_default_str();
  cmd->add_option("--mode", plan->mode,
                  "per_kernel: limit per kernel; total (= total_shared): one budget that "
                  "kernels run one after another share; total_sum: one budget for the sum of "
                  "kernels that run concurrently (ILP)")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ucudnn: micro-batched cuDNN convolutions, planned for a whole cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ucudnn ") + UCUDNN_VERSION);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->envname("UCUDNN_LOG_LEVEL")
      ->capture_default_str();
  std::string database_url;
  ServerOptions server;
  int rc = 0;

  app.add_subcommand("networks", "List the built-in networks")->callback([&] {
    rc = RunNetworks();
  });

  NetworkOptions problem_net;
  bool unique_only = false;
  auto* problem = app.add_subcommand("problem", "Print a network's convolution kernels and keys");
  AddNetworkFlags(problem, &problem_net);
  problem->add_flag("--unique", unique_only, "Each distinct problem once");
  problem->callback([&] { rc = RunProblem(problem_net, unique_only); });

  app.add_subcommand("gpus", "List the GPUs and their device fingerprints (exit 1 if none)")
      ->callback([&] { rc = RunGpus(); });

  CpuBenchOptions bench;
  bench.net.network = "alexnet";
  bench.net.batch = 16;
  auto* cpu_bench = app.add_subcommand(
      "cpu-bench", "Benchmark a network's kernels on the CPU backend and print the plan table");
  AddNetworkFlags(cpu_bench, &bench.net);
  cpu_bench->add_option("--policy", bench.policy, "undivided, power_of_two, all")
      ->capture_default_str();
  cpu_bench->add_option("--workspace,-w", bench.workspace, "Per-kernel workspace limit")
      ->capture_default_str();
  cpu_bench->add_option("--output", bench.output_csv, "Also write the timings to this CSV");
  cpu_bench
      ->add_option("--threads", bench.threads,
                   "BLAS threads (0: OpenBLAS's default); part of the device fingerprint")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cpu_bench->callback([&] { rc = RunCpuBench(bench); });

  auto* migrate = app.add_subcommand("migrate", "Apply the schema migrations to a database");
  migrate->add_option("--database-url", database_url, "PostgreSQL URL")
      ->envname("UCUDNN_DATABASE_URL");
  migrate->callback([&] { rc = RunMigrate(database_url); });

  std::string import_file;
  // Not `import`: clang-format 14 reads that name as the C++20 keyword and stops indenting.
  auto* import_cmd = app.add_subcommand(
      "import", "Load a timings file written by `ucudnn-worker --offline` into a database");
  import_cmd->add_option("file", import_file, "Timings file")->required();
  import_cmd->add_option("--database-url", database_url, "PostgreSQL URL")
      ->envname("UCUDNN_DATABASE_URL");
  import_cmd->callback([&] { rc = RunImport(database_url, import_file); });

  auto* health = app.add_subcommand("health", "Check a server's grpc.health.v1 status");
  AddServerFlags(health, &server);
  health->callback([&] { rc = RunHealth(server); });

  // --json on every read command: one JSON document on stdout instead of the table.
  bool json = false;
  const char* json_help = "Print the answer as JSON";
  auto* devices = app.add_subcommand("devices", "Devices known to the cluster");
  AddServerFlags(devices, &server);
  devices->add_flag("--json", json, json_help);
  devices->callback([&] { rc = RunDevices(server, json); });

  bool alive_only = false;
  auto* workers = app.add_subcommand("workers", "Registered workers");
  AddServerFlags(workers, &server);
  workers->add_flag("--alive", alive_only, "Only workers with a recent heartbeat");
  workers->add_flag("--json", json, json_help);
  workers->callback([&] { rc = RunWorkers(server, alive_only, json); });

  std::string job_state;
  int job_limit = 50;
  auto* jobs = app.add_subcommand("jobs", "Benchmark jobs, newest first");
  AddServerFlags(jobs, &server);
  int64_t retry_job = 0;
  jobs->add_option("--state", job_state, "queued, running, expired, done, failed");
  jobs->add_option("--limit", job_limit, "At most this many")->capture_default_str();
  jobs->add_option("--retry", retry_job,
                   "Instead of listing, put this failed job back in the queue (needs --token)");
  int64_t cancel_job = 0;
  bool cancel_all_queued = false;
  std::string cancel_device;
  auto* cancel = jobs->add_option("--cancel", cancel_job,
                                  "Instead of listing, take this queued job out of the queue "
                                  "(needs --token)");
  auto* all_queued = jobs->add_flag("--all-queued", cancel_all_queued,
                                    "Instead of listing, take every queued job out of the queue "
                                    "(needs --token)");
  cancel->excludes(all_queued);
  jobs->add_option("--device", cancel_device,
                   "With --all-queued: only this device's jobs (hash prefix or index in "
                   "`ucudnn devices`)")
      ->needs(all_queued);
  jobs->add_flag("--json", json, json_help);
  jobs->callback([&] {
    if (cancel->count() > 0) {
      rc = RunCancelJobs(server, cancel_job, "", json);
    } else if (cancel_all_queued) {
      rc = RunCancelJobs(server, std::nullopt, cancel_device, json);
    } else if (retry_job != 0) {
      rc = RunRetryJob(server, retry_job);
    } else {
      rc = RunJobs(server, job_state, job_limit, json);
    }
  });

  PlanOptions plan;
  auto* plan_cmd = app.add_subcommand("plan", "Ask the server for a network's plan");
  AddServerFlags(plan_cmd, &server);
  AddPlanFlags(plan_cmd, &plan);
  plan_cmd
      ->add_option("--wait", plan.wait,
                   "Wait this long for missing benchmarks, showing progress (e.g. 10m)")
      ->capture_default_str();
  plan_cmd->add_flag("--json", plan.json, json_help);
  bool total_flag = false;
  plan_cmd->add_flag("--total", total_flag, "Shorthand for --mode total");
  plan_cmd->callback([&] {
    if (total_flag) plan.mode = "total";
    rc = RunPlan(server, plan);
  });

  auto* explain = app.add_subcommand("explain", "The server's explanation of a plan");
  AddServerFlags(explain, &server);
  AddPlanFlags(explain, &plan);
  explain->add_flag("--json", plan.json, json_help);
  explain->callback([&] { rc = RunExplain(server, plan); });

  auto* timings = app.add_subcommand("timings", "Stored timings of a network's problems");
  AddServerFlags(timings, &server);
  AddPlanFlags(timings, &plan);
  timings->add_flag("--json", plan.json, json_help);
  timings->callback([&] { rc = RunTimings(server, plan); });

  CurveOptions curve;
  auto* curve_cmd = app.add_subcommand(
      "curve", "Predicted step time against the workspace limit (table, JSON, or an SVG)");
  AddServerFlags(curve_cmd, &server);
  AddPlanFlags(curve_cmd, &curve.plan);
  curve_cmd
      ->add_option("--max-workspace", curve.max_workspace,
                   "Largest limit: the curve goes 0, 64 KiB, 128 KiB, ... up to it")
      ->capture_default_str();
  curve_cmd->add_option("--svg", curve.svg, "Also draw the curve into this SVG file");
  curve_cmd->add_flag("--json", curve.plan.json, json_help);
  curve_cmd->callback([&] { rc = RunCurve(server, curve); });

  ucudnn::LogToStderr("ucudnn");  // stdout is for the commands' tables
  app.parse_complete_callback([&] {
    auto level = spdlog::level::from_str(log_level);
    spdlog::set_level(level);
  });
  CLI11_PARSE(app, argc, argv);
  return rc;
}
