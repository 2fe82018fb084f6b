// `ucudnn`: operator and developer commands. Thin: flags are parsed here, the work is done in
// ucudnn::cli (ucudnn_cli_lib).
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
  cmd->add_option("--token", server->token,
                  "Bearer token: its role (read, plan, submit, admin) decides what the server "
                  "lets the call do; without one, the server's anonymous role (read by default: "
                  "reads, and plans from stored timings)")
      ->envname("UCUDNN_TOKEN");
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

// Every command's flags land here; the command that runs sets `rc`.
struct CommandState {
  int rc = 0;
  std::string log_level = "warn";
  std::string database_url;
  ServerOptions server;
  bool json = false;  // --json on every read command: one JSON document instead of the table
  // problem
  NetworkOptions problem_net;
  bool unique_only = false;
  // cpu-bench
  CpuBenchOptions bench;
  // import
  std::string import_file;
  // workers
  bool alive_only = false;
  // jobs
  std::string job_state;
  int job_limit = 50;
  int64_t retry_job = 0;
  int64_t cancel_job = 0;
  bool cancel_all_queued = false;
  std::string cancel_device;
  // plan, explain, timings, curve
  PlanOptions plan;
  bool total_flag = false;
  CurveOptions curve;
};

constexpr const char* kJsonHelp = "Print the answer as JSON";

// Commands that run on this machine alone.
void AddLocalCommands(CLI::App& app, CommandState& s) {
  app.add_subcommand("networks", "List the built-in networks")->callback([&s] {
    s.rc = RunNetworks();
  });

  auto* problem = app.add_subcommand("problem", "Print a network's convolution kernels and keys");
  AddNetworkFlags(problem, &s.problem_net);
  problem->add_flag("--unique", s.unique_only, "Each distinct problem once");
  problem->callback([&s] { s.rc = RunProblem(s.problem_net, s.unique_only); });

  app.add_subcommand("gpus", "List the GPUs and their device fingerprints (exit 1 if none)")
      ->callback([&s] { s.rc = RunGpus(); });

  s.bench.net.network = "alexnet";
  s.bench.net.batch = 16;
  auto* cpu_bench = app.add_subcommand(
      "cpu-bench", "Benchmark a network's kernels on the CPU backend and print the plan table");
  AddNetworkFlags(cpu_bench, &s.bench.net);
  cpu_bench->add_option("--policy", s.bench.policy, "undivided, power_of_two, all")
      ->capture_default_str();
  cpu_bench->add_option("--workspace,-w", s.bench.workspace, "Per-kernel workspace limit")
      ->capture_default_str();
  cpu_bench->add_option("--output", s.bench.output_csv, "Also write the timings to this CSV");
  cpu_bench
      ->add_option("--threads", s.bench.threads,
                   "BLAS threads (0: OpenBLAS's default); part of the device fingerprint")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cpu_bench->callback([&s] { s.rc = RunCpuBench(s.bench); });
}

// Commands that work on a database directly.
void AddDatabaseCommands(CLI::App& app, CommandState& s) {
  auto* migrate = app.add_subcommand("migrate", "Apply the schema migrations to a database");
  migrate->add_option("--database-url", s.database_url, "PostgreSQL URL")
      ->envname("UCUDNN_DATABASE_URL");
  migrate->callback([&s] { s.rc = RunMigrate(s.database_url); });

  // Not `import`: clang-format 14 reads that name as the C++20 keyword and stops indenting.
  auto* import_cmd = app.add_subcommand(
      "import", "Load a timings file written by `ucudnn-worker --offline` into a database");
  import_cmd->add_option("file", s.import_file, "Timings file")->required();
  import_cmd->add_option("--database-url", s.database_url, "PostgreSQL URL")
      ->envname("UCUDNN_DATABASE_URL");
  import_cmd->callback([&s] { s.rc = RunImport(s.database_url, s.import_file); });
}

// The cluster's state from a server: health, devices, workers.
void AddClusterCommands(CLI::App& app, CommandState& s) {
  auto* health = app.add_subcommand("health", "Check a server's grpc.health.v1 status");
  AddServerFlags(health, &s.server);
  health->callback([&s] { s.rc = RunHealth(s.server); });

  auto* devices = app.add_subcommand("devices", "Devices known to the cluster");
  AddServerFlags(devices, &s.server);
  devices->add_flag("--json", s.json, kJsonHelp);
  devices->callback([&s] { s.rc = RunDevices(s.server, s.json); });

  auto* workers = app.add_subcommand("workers", "Registered workers");
  AddServerFlags(workers, &s.server);
  workers->add_flag("--alive", s.alive_only, "Only workers with a recent heartbeat");
  workers->add_flag("--json", s.json, kJsonHelp);
  workers->callback([&s] { s.rc = RunWorkers(s.server, s.alive_only, s.json); });
}

// `jobs`: lists the benchmark jobs, or retries or cancels them.
void AddJobsCommand(CLI::App& app, CommandState& s) {
  auto* jobs = app.add_subcommand("jobs", "Benchmark jobs, newest first");
  AddServerFlags(jobs, &s.server);
  jobs->add_option("--state", s.job_state, "queued, running, expired, done, failed");
  jobs->add_option("--limit", s.job_limit, "At most this many")->capture_default_str();
  jobs->add_option("--retry", s.retry_job,
                   "Instead of listing, put this failed job back in the queue (needs --token)");
  auto* cancel = jobs->add_option("--cancel", s.cancel_job,
                                  "Instead of listing, take this queued job out of the queue "
                                  "(needs --token)");
  auto* all_queued = jobs->add_flag("--all-queued", s.cancel_all_queued,
                                    "Instead of listing, take every queued job out of the queue "
                                    "(needs --token)");
  cancel->excludes(all_queued);
  jobs->add_option("--device", s.cancel_device,
                   "With --all-queued: only this device's jobs (hash prefix or index in "
                   "`ucudnn devices`)")
      ->needs(all_queued);
  jobs->add_flag("--json", s.json, kJsonHelp);
  jobs->callback([&s, cancel] {
    if (cancel->count() > 0) {
      s.rc = RunCancelJobs(s.server, s.cancel_job, "", s.json);
    } else if (s.cancel_all_queued) {
      s.rc = RunCancelJobs(s.server, std::nullopt, s.cancel_device, s.json);
    } else if (s.retry_job != 0) {
      s.rc = RunRetryJob(s.server, s.retry_job);
    } else {
      s.rc = RunJobs(s.server, s.job_state, s.job_limit, s.json);
    }
  });
}

// A network's plan from the server, its explanation, its timings and its curve.
void AddPlanCommands(CLI::App& app, CommandState& s) {
  auto* plan_cmd = app.add_subcommand("plan", "Ask the server for a network's plan");
  AddServerFlags(plan_cmd, &s.server);
  AddPlanFlags(plan_cmd, &s.plan);
  plan_cmd
      ->add_option("--wait", s.plan.wait,
                   "Wait this long for missing benchmarks, showing progress (e.g. 10m)")
      ->capture_default_str();
  plan_cmd->add_flag("--json", s.plan.json, kJsonHelp);
  plan_cmd->add_flag("--total", s.total_flag, "Shorthand for --mode total");
  plan_cmd->callback([&s] {
    if (s.total_flag) s.plan.mode = "total";
    s.rc = RunPlan(s.server, s.plan);
  });

  auto* explain = app.add_subcommand("explain", "The server's explanation of a plan");
  AddServerFlags(explain, &s.server);
  AddPlanFlags(explain, &s.plan);
  explain->add_flag("--json", s.plan.json, kJsonHelp);
  explain->callback([&s] { s.rc = RunExplain(s.server, s.plan); });

  auto* timings = app.add_subcommand("timings", "Stored timings of a network's problems");
  AddServerFlags(timings, &s.server);
  AddPlanFlags(timings, &s.plan);
  timings->add_flag("--json", s.plan.json, kJsonHelp);
  timings->callback([&s] { s.rc = RunTimings(s.server, s.plan); });

  auto* curve_cmd = app.add_subcommand(
      "curve", "Predicted step time against the workspace limit (table, JSON, or an SVG)");
  AddServerFlags(curve_cmd, &s.server);
  AddPlanFlags(curve_cmd, &s.curve.plan);
  curve_cmd
      ->add_option("--max-workspace", s.curve.max_workspace,
                   "Largest limit: the curve goes 0, 64 KiB, 128 KiB, ... up to it")
      ->capture_default_str();
  curve_cmd->add_option("--svg", s.curve.svg, "Also draw the curve into this SVG file");
  curve_cmd->add_flag("--json", s.curve.plan.json, kJsonHelp);
  curve_cmd->callback([&s] { s.rc = RunCurve(s.server, s.curve); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ucudnn: micro-batched cuDNN convolutions, planned for a whole cluster"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ucudnn ") + UCUDNN_VERSION);
  CommandState state;
  app.add_option("--log-level", state.log_level, "trace, debug, info, warn, error")
      ->envname("UCUDNN_LOG_LEVEL")
      ->capture_default_str();
  AddLocalCommands(app, state);
  AddDatabaseCommands(app, state);
  AddClusterCommands(app, state);
  AddJobsCommand(app, state);
  AddPlanCommands(app, state);

  ucudnn::LogToStderr("ucudnn");  // stdout is for the commands' tables
  app.parse_complete_callback([&] {
    auto level = spdlog::level::from_str(state.log_level);
    spdlog::set_level(level);
  });
  CLI11_PARSE(app, argc, argv);
  return state.rc;
}
