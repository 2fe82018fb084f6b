// `ucudnn`: operator and developer commands. Thin: flags are parsed here, the work is done in
// ucudnn::cli (ucudnn_cli_lib).
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <deque>
#include <functional>

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

// Every flag that reads the environment is bound to a variable of its own subcommand: CLI11
// (2.1) fills the environment into the options of every subcommand, the unused ones too, so a
// variable shared by several subcommands would end up with the environment's value over the flag
// given (issue 22). `storage` keeps one ServerFlags per subcommand.
ServerFlags* AddServerFlags(CLI::App* cmd, std::deque<ServerFlags>* storage) {
  ServerFlags* flags = &storage->emplace_back();
  ServerOptions* server = &flags->options;
  cmd->add_option("--server,-s", server->address, "Planner server address host:port")
      ->envname("UCUDNN_SERVER")
      ->capture_default_str();
  cmd->add_option("--tls-ca", server->tls_ca_file,
                  "Use TLS, verifying the server with this CA file (UCUDNN_TLS_CA, the old "
                  "name of the variable, is still read)")
      ->envname("UCUDNN_CA_FILE");
  cmd->add_option("--token", server->token,
                  "Bearer token: its role (read, plan, submit, admin) decides what the server "
                  "lets the call do; without one, the server's anonymous role (read by default: "
                  "reads, and plans from stored timings)")
      ->envname("UCUDNN_TOKEN");
  cmd->add_option("--token-file", flags->token_file,
                  "Read the bearer token from this file instead (its first line: TOKEN or ROLE "
                  "TOKEN; keeps the token out of `ps`): wins over --token and UCUDNN_TOKEN; "
                  "UCUDNN_TOKEN_FILE is read when no token is given at all");
  cmd->add_option("--deadline-ms", server->deadline_ms, "Deadline of each call, milliseconds")
      ->capture_default_str();
  return flags;
}

// The subcommand's database URL, a variable of its own (see AddServerFlags).
std::string* AddDatabaseFlag(CLI::App* cmd, std::deque<std::string>* storage) {
  std::string* url = &storage->emplace_back();
  cmd->add_option("--database-url", *url, "PostgreSQL URL")->envname("UCUDNN_DATABASE_URL");
  return url;
}

// Runs `command` with the server options resolved (token file, deprecated variables); a token
// file that cannot be read is a usage error.
int WithServer(const ServerFlags& flags, const std::function<int(const ServerOptions&)>& command) {
  auto options = ResolveServerOptions(flags);
  if (!options.ok()) {
    Fail(options.status());
    return 2;
  }
  return command(*options);
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
  std::deque<std::string> database_urls;  // one per subcommand (AddDatabaseFlag)
  std::deque<ServerFlags> servers;        // one per subcommand (AddServerFlags)
  bool json = false;  // --json on every read command: one JSON document instead of the table
  // problem
  NetworkOptions problem_net;
  bool unique_only = false;
  // cpu-bench
  CpuBenchOptions bench;
  // migrate
  int migrate_to_version = 0;
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
  auto* networks = app.add_subcommand("networks", "List the built-in networks");
  networks->add_flag("--json", s.json, kJsonHelp);
  networks->callback([&s] { s.rc = RunNetworks(s.json); });

  auto* problem = app.add_subcommand("problem", "Print a network's convolution kernels and keys");
  AddNetworkFlags(problem, &s.problem_net);
  problem->add_flag("--unique", s.unique_only, "Each distinct problem once");
  problem->add_flag("--json", s.json, kJsonHelp);
  problem->callback([&s] { s.rc = RunProblem(s.problem_net, s.unique_only, s.json); });

  auto* gpus =
      app.add_subcommand("gpus", "List the GPUs and their device fingerprints (exit 1 if none)");
  gpus->add_flag("--json", s.json, kJsonHelp);
  gpus->callback([&s] { s.rc = RunGpus(s.json); });

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
  std::string* migrate_url = AddDatabaseFlag(migrate, &s.database_urls);
  migrate
      ->add_option("--to-version", s.migrate_to_version,
                   "Stop after this schema version (to restore a data-only dump of that "
                   "version, then migrate the rest)")
      ->check(CLI::Range(1, 9999));
  migrate->callback([&s, migrate_url] { s.rc = RunMigrate(*migrate_url, s.migrate_to_version); });

  // Not `import`: clang-format 14 reads that name as the C++20 keyword and stops indenting.
  auto* import_cmd = app.add_subcommand(
      "import", "Load a timings file written by `ucudnn-worker --offline` into a database");
  import_cmd->add_option("file", s.import_file, "Timings file")->required();
  std::string* import_url = AddDatabaseFlag(import_cmd, &s.database_urls);
  import_cmd->callback([&s, import_url] { s.rc = RunImport(*import_url, s.import_file); });
}

// The cluster's state from a server: health, devices, workers.
void AddClusterCommands(CLI::App& app, CommandState& s) {
  auto* health = app.add_subcommand("health", "Check a server's grpc.health.v1 status");
  const ServerFlags* health_server = AddServerFlags(health, &s.servers);
  health->add_flag("--json", s.json, kJsonHelp);
  health->callback([&s, health_server] {
    s.rc = WithServer(*health_server, [&](const ServerOptions& o) { return RunHealth(o, s.json); });
  });

  auto* devices = app.add_subcommand("devices", "Devices known to the cluster");
  const ServerFlags* devices_server = AddServerFlags(devices, &s.servers);
  devices->add_flag("--json", s.json, kJsonHelp);
  devices->callback([&s, devices_server] {
    s.rc =
        WithServer(*devices_server, [&](const ServerOptions& o) { return RunDevices(o, s.json); });
  });

  auto* workers = app.add_subcommand("workers", "Registered workers");
  const ServerFlags* workers_server = AddServerFlags(workers, &s.servers);
  workers->add_flag("--alive", s.alive_only, "Only workers with a recent heartbeat");
  workers->add_flag("--json", s.json, kJsonHelp);
  workers->callback([&s, workers_server] {
    s.rc = WithServer(*workers_server,
                      [&](const ServerOptions& o) { return RunWorkers(o, s.alive_only, s.json); });
  });
}

// `jobs`: lists the benchmark jobs, or retries or cancels them.
void AddJobsCommand(CLI::App& app, CommandState& s) {
  auto* jobs = app.add_subcommand("jobs", "Benchmark jobs, newest first");
  const ServerFlags* jobs_server = AddServerFlags(jobs, &s.servers);
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
  jobs->callback([&s, cancel, jobs_server] {
    s.rc = WithServer(*jobs_server, [&](const ServerOptions& o) {
      if (cancel->count() > 0) return RunCancelJobs(o, s.cancel_job, "", s.json);
      if (s.cancel_all_queued) return RunCancelJobs(o, std::nullopt, s.cancel_device, s.json);
      if (s.retry_job != 0) return RunRetryJob(o, s.retry_job);
      return RunJobs(o, s.job_state, s.job_limit, s.json);
    });
  });
}

// A network's plan from the server, its explanation, its timings and its curve.
void AddPlanCommands(CLI::App& app, CommandState& s) {
  auto* plan_cmd = app.add_subcommand("plan", "Ask the server for a network's plan");
  const ServerFlags* plan_server = AddServerFlags(plan_cmd, &s.servers);
  AddPlanFlags(plan_cmd, &s.plan);
  plan_cmd
      ->add_option("--wait", s.plan.wait,
                   "Wait this long for missing benchmarks, showing progress (e.g. 10m)")
      ->capture_default_str();
  plan_cmd->add_flag("--json", s.plan.json, kJsonHelp);
  plan_cmd->add_flag("--total", s.total_flag, "Shorthand for --mode total");
  plan_cmd->callback([&s, plan_server] {
    if (s.total_flag) s.plan.mode = "total";
    s.rc = WithServer(*plan_server, [&](const ServerOptions& o) { return RunPlan(o, s.plan); });
  });

  auto* explain = app.add_subcommand("explain", "The server's explanation of a plan");
  const ServerFlags* explain_server = AddServerFlags(explain, &s.servers);
  AddPlanFlags(explain, &s.plan);
  explain->add_flag("--json", s.plan.json, kJsonHelp);
  explain->callback([&s, explain_server] {
    s.rc =
        WithServer(*explain_server, [&](const ServerOptions& o) { return RunExplain(o, s.plan); });
  });

  auto* timings = app.add_subcommand("timings", "Stored timings of a network's problems");
  const ServerFlags* timings_server = AddServerFlags(timings, &s.servers);
  AddPlanFlags(timings, &s.plan);
  timings->add_flag("--json", s.plan.json, kJsonHelp);
  timings->add_flag("--wrong-results", s.plan.wrong_results,
                    "only the configurations blocked on the device for computing a wrong result "
                    "(checked against the fp32 reference by the worker; never planned)");
  timings->callback([&s, timings_server] {
    s.rc =
        WithServer(*timings_server, [&](const ServerOptions& o) { return RunTimings(o, s.plan); });
  });

  auto* curve_cmd = app.add_subcommand(
      "curve", "Predicted step time against the workspace limit (table, JSON, or an SVG)");
  const ServerFlags* curve_server = AddServerFlags(curve_cmd, &s.servers);
  AddPlanFlags(curve_cmd, &s.curve.plan);
  curve_cmd
      ->add_option("--max-workspace", s.curve.max_workspace,
                   "Largest limit: the curve goes 0, 64 KiB, 128 KiB, ... up to it")
      ->capture_default_str();
  curve_cmd->add_option("--svg", s.curve.svg, "Also draw the curve into this SVG file");
  curve_cmd->add_flag("--json", s.curve.plan.json, kJsonHelp);
  curve_cmd->callback([&s, curve_server] {
    s.rc = WithServer(*curve_server, [&](const ServerOptions& o) { return RunCurve(o, s.curve); });
  });
}

// A command line that does not parse: one clear line and exit status 2 (CLI11's own codes,
// 104-114, mean nothing to a shell script). An unknown flag before the subcommand is named as
// such, not as a missing subcommand.
int UsageError(const CLI::App& app, const CLI::ParseError& error) {
  std::string message = error.what();
  const auto extras = app.remaining(true);
  if (app.get_subcommands().empty() && !extras.empty()) {
    message = "unknown flag or command '" + extras.front() + "'";
  }
  std::fprintf(stderr, "ucudnn: %s\nRun 'ucudnn --help' (or 'ucudnn COMMAND --help') for usage.\n",
               message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ucudnn: micro-batched cuDNN convolutions, planned for a whole cluster"};
  app.require_subcommand(1);
  app.footer(
      "Environment: each flag's variable is named in its command's --help (a flag given wins). "
      "Also read: UCUDNN_TOKEN_FILE (the token's file, when neither --token, --token-file nor "
      "UCUDNN_TOKEN is given) and UCUDNN_TLS_CA (deprecated name of UCUDNN_CA_FILE).");
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return UsageError(app, e);
  }
  return state.rc;
}
