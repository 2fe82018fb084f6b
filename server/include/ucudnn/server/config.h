// The planner server's configuration: flags, each with an environment variable behind it (a flag
// wins over its variable, a variable over the default). Parsing is pure: the environment comes in
// as a function, so tests need no setenv.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn::server {

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  std::string database_url;
  std::vector<std::string> tokens;  // role admin: --tokens, plus --token-file lines without a role
  std::string token_file;
  std::vector<std::string> plan_tokens;    // --token-file lines "plan TOKEN"
  std::vector<std::string> submit_tokens;  // --token-file lines "submit TOKEN"
  std::vector<std::string> read_tokens;    // --token-file lines "read TOKEN"
  std::string anonymous_role = "read";     // callers without a token: none, read, plan or open
  std::string tls_cert;
  std::string tls_key;
  std::string log_level = "info";
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no metrics endpoint
  bool auto_migrate = true;
  int db_pool_size = 8;
  int max_kernels = 4096;
  int64_t max_message_bytes = 16 << 20;
  int plan_cache_entries = 1024;        // in-process LRU in front of the database's plan cache
  int64_t plan_cache_max_rows = 10000;  // database plan cache rows per device; 0: unbounded
  int64_t plan_cache_evict_interval_ms = 60000;
  // Rows of workers without a heartbeat for this long are deleted (on the eviction schedule); 0:
  // kept for ever.
  int64_t worker_retention_ms = int64_t{7} * 86400000;
  int64_t failed_job_cooldown_ms = 3600000;  // a failed job blocks re-enqueueing this long
  int max_blocking_calls = 1024;             // plan calls planning or waiting at once
  int planner_threads = 8;                   // threads that do every call's work
  int timings_cache_entries = 8192;          // (device, problem) timing tables kept in process
  int64_t timings_cache_ttl_ms = 300000;
  int64_t ilp_time_limit_ms = 10000;
  int64_t shutdown_grace_ms = 10000;
  int64_t start_timeout_ms = 60000;  // keep retrying an unreachable database this long at start
  // With --no-migrate: keep waiting for a schema older than this binary's (a migration job still
  // running) this long at start.
  int64_t schema_wait_ms = 300000;
  int64_t health_interval_ms = 2000;
  int64_t recheck_interval_ms = 1000;  // fallback re-check while waiting for benchmarks
  // Per-kernel plans ask the workers for the micro-batch sizes each kernel's workspace limit can
  // use (core/size_rule.h); false (the default): every size of the policy, whatever the limit.
  // Off by default: on an H200 it timed a third of ResNet-50's configurations but took 1.8x as
  // long (docs/results.md).
  bool sizes_for_limit = false;
};

// What the command line asked for: run with a configuration, or print help / the version.
struct ParsedCommandLine {
  enum class Action { kRun, kHelp, kVersion };
  Action action = Action::kRun;
  ServerConfig config;
};

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();

// Parses `args` (without the program name): "--flag value" and "--flag=value". Every error names
// the flag (or variable) and what it accepts. Does not read the token file (see LoadTokenFile).
Result<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                           const EnvLookup& env);
// Checks the combination: database URL present, TLS cert and key together, bounds.
Status ValidateConfig(const ServerConfig& config);
// Adds the tokens of config.token_file (if set) to config.tokens.
Status LoadTokenFile(ServerConfig& config);

// Whether main retries a failed PlannerServer::Start, and after how long: nullopt to give up.
// An unreachable database (kUnavailable) is retried until --start-timeout, a schema older than
// this binary's (`schema_behind`) until --schema-wait, both counted from the first attempt
// (`elapsed` ago); the delay of retry `attempt` (0 for the first) is BackoffDelay from 250 ms up
// to 5 s. Anything else (bad TLS files, an address in use, a schema too new) is final.
std::optional<std::chrono::milliseconds> StartRetryDelay(const ServerConfig& config,
                                                         const Status& failure, bool schema_behind,
                                                         std::chrono::milliseconds elapsed,
                                                         int64_t attempt);

// --help: every flag with its variable and default.
std::string HelpText(std::string_view program);

}  // namespace ucudnn::server
