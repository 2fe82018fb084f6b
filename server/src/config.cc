#include "ucudnn/server/config.h"

#include "ucudnn/core/backoff.h"

#include <algorithm>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"
#include "ucudnn/server/auth.h"

namespace ucudnn::server {
namespace {

struct FlagSpec {
  std::string_view name;     // without the leading "--"
  std::string_view env;      // environment variable, empty when none
  std::string_view metavar;  // empty for a switch that takes no value
  std::string_view help;
  std::string_view default_text;
  // Applies a value; `where` is the flag or variable name, for error messages.
  std::function<Status(ServerConfig&, std::string_view value, std::string_view where)> apply;
  // Applies the environment variable when it reads differently from the flag (switches).
  std::function<Status(ServerConfig&, std::string_view value, std::string_view where)> apply_env;
};

Status Bad(std::string_view where, std::string_view what, std::string_view value) {
  return InvalidArgument(std::string(where) + ": " + std::string(what) + ", got '" +
                         std::string(value) + "'");
}

Result<int64_t> ParseInt(std::string_view where, std::string_view value, int64_t lo, int64_t hi) {
  auto v = ParseInteger<int64_t>(where, value, lo, hi);
  if (!v.ok()) {
    return Bad(where,
               "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
               value);
  }
  return v;
}

Result<int64_t> ParseDuration(std::string_view where, std::string_view value, int64_t lo_ms,
                              int64_t hi_ms) {
  auto ms = ParseDurationMs(value);
  if (!ms.ok() || *ms < lo_ms || *ms > hi_ms) {
    return Bad(where,
               "must be a duration (\"500ms\", \"10s\") between " + std::to_string(lo_ms) +
                   " ms and " + std::to_string(hi_ms) + " ms",
               value);
  }
  return *ms;
}

// host:port with a numeric port; host may be a bracketed IPv6 address.
Status CheckAddress(std::string_view where, std::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Bad(where, "must be HOST:PORT", value);
  }
  auto port = ParseInt(where, value.substr(colon + 1), 0, 65535);
  if (!port.ok()) return Bad(where, "must be HOST:PORT with a port in [0, 65535]", value);
  return Status::Ok();
}

template <typename T>
auto IntFlag(T ServerConfig::*field, int64_t lo, int64_t hi) {
  return [field, lo, hi](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
    UCUDNN_ASSIGN_OR_RETURN(const int64_t parsed, ParseInt(where, v, lo, hi));
    c.*field = static_cast<T>(parsed);
    return Status::Ok();
  };
}

auto DurationFlag(int64_t ServerConfig::*field, int64_t lo_ms, int64_t hi_ms) {
  return
      [field, lo_ms, hi_ms](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
        UCUDNN_ASSIGN_OR_RETURN(c.*field, ParseDuration(where, v, lo_ms, hi_ms));
        return Status::Ok();
      };
}

auto StringFlag(std::string ServerConfig::*field) {
  return [field](ServerConfig& c, std::string_view v, std::string_view) -> Status {
    c.*field = std::string(v);
    return Status::Ok();
  };
}

const std::vector<FlagSpec>& Specs() {
  static const std::vector<FlagSpec> specs = {
      {"listen", "UCUDNN_LISTEN", "HOST:PORT",
       "gRPC address to listen on (port 0 picks a free port)", "127.0.0.1:50051",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         UCUDNN_RETURN_IF_ERROR(CheckAddress(where, v));
         c.listen = std::string(v);
         return Status::Ok();
       },
       nullptr},
      {"database-url", "UCUDNN_DATABASE_URL", "URL",
       "PostgreSQL connection string (postgresql://user:pass@host:5432/db or key=value form); "
       "required",
       "", StringFlag(&ServerConfig::database_url), nullptr},
      {"tokens", "UCUDNN_TOKENS", "T1,T2",
       "comma-separated bearer tokens accepted by the writes, TimingService.SubmitTimings and "
       "CatalogService.RetryJob (no token: writes refused)",
       "",
       [](ServerConfig& c, std::string_view v, std::string_view) -> Status {
         for (auto& t : SplitTokenList(v)) c.tokens.push_back(std::move(t));
         return Status::Ok();
       },
       nullptr},
      {"token-file", "UCUDNN_TOKEN_FILE", "PATH",
       "file of bearer tokens, one per line ('#' comments): 'TOKEN' (role admin, as --tokens) or "
       "'ROLE TOKEN' with ROLE read, plan (may enqueue benchmarks for known devices), submit (may "
       "submit timings, registering devices) or admin (everything)",
       "", StringFlag(&ServerConfig::token_file), nullptr},
      {"anonymous-role", "UCUDNN_ANONYMOUS_ROLE", "ROLE",
       "what callers without a token may do: none (every call needs a token), read (catalog and "
       "plans from the stored timings; nothing they send creates a row), plan (also enqueue "
       "benchmarks for known devices) or open (also register unknown devices by planning for "
       "them, as before roles existed; a closed network only)",
       "read",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         if (auto parsed = ParseAnonymousRole(v); !parsed.ok()) {
           return InvalidArgument(std::string(where) + ": must be none, read, plan or open, got " +
                                  QuoteForError(v));
         }
         c.anonymous_role = std::string(v);
         return Status::Ok();
       },
       nullptr},
      {"tls-cert", "UCUDNN_TLS_CERT", "PATH", "PEM certificate chain; with --tls-key serves TLS",
       "", StringFlag(&ServerConfig::tls_cert), nullptr},
      {"tls-key", "UCUDNN_TLS_KEY", "PATH", "PEM private key of --tls-cert", "",
       StringFlag(&ServerConfig::tls_key), nullptr},
      {"log-level", "UCUDNN_LOG_LEVEL", "LEVEL", "trace, debug, info, warn, error, critical or off",
       "info",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};
         for (auto level : kLevels) {
           if (v == level) {
             c.log_level = std::string(v);
             return Status::Ok();
           }
         }
         return Bad(where, "must be one of trace, debug, info, warn, error, critical, off", v);
       },
       nullptr},
      {"metrics-listen", "UCUDNN_METRICS_LISTEN", "HOST:PORT",
       "HTTP address of the Prometheus /metrics endpoint; empty disables it", "127.0.0.1:9464",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         if (!v.empty()) UCUDNN_RETURN_IF_ERROR(CheckAddress(where, v));
         c.metrics_listen = std::string(v);
         return Status::Ok();
       },
       nullptr},
      {"no-migrate", "UCUDNN_AUTO_MIGRATE", "",
       "do not apply database migrations at start (variable: UCUDNN_AUTO_MIGRATE=0)", "migrate",
       [](ServerConfig& c, std::string_view, std::string_view) -> Status {
         c.auto_migrate = false;
         return Status::Ok();
       },
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         UCUDNN_ASSIGN_OR_RETURN(c.auto_migrate, ParseBool(where, v));
         return Status::Ok();
       }},
      {"db-pool-size", "UCUDNN_DB_POOL_SIZE", "N", "database connections kept open, 1 to 256", "8",
       IntFlag(&ServerConfig::db_pool_size, 1, 256), nullptr},
      {"max-kernels", "UCUDNN_MAX_KERNELS", "N", "most kernels in one plan request, 1 to 4096",
       "4096", IntFlag(&ServerConfig::max_kernels, 1, 4096), nullptr},
      {"max-message-bytes", "UCUDNN_MAX_MESSAGE_BYTES", "SIZE",
       "largest gRPC request accepted (\"16MiB\"), 4 KiB to 1 GiB", "16 MiB",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         auto bytes = ParseByteSize(v);
         if (!bytes.ok() || *bytes < 4096 || *bytes > (uint64_t{1} << 30)) {
           return Bad(where, "must be a size between 4 KiB and 1 GiB (\"16MiB\")", v);
         }
         c.max_message_bytes = static_cast<int64_t>(*bytes);
         return Status::Ok();
       },
       nullptr},
      {"plan-cache-entries", "UCUDNN_PLAN_CACHE_ENTRIES", "N",
       "complete plans kept in process in front of the database cache; 0 disables", "1024",
       IntFlag(&ServerConfig::plan_cache_entries, 0, 1 << 24), nullptr},
      {"plan-cache-max-rows", "UCUDNN_PLAN_CACHE_MAX_ROWS", "N",
       "plans kept per device in the database's shared plan cache; the least recently used "
       "beyond it are deleted every --plan-cache-evict-interval (one replica at a time); 0 keeps "
       "every plan",
       "10000", IntFlag(&ServerConfig::plan_cache_max_rows, 0, int64_t{1} << 31), nullptr},
      {"plan-cache-evict-interval", "UCUDNN_PLAN_CACHE_EVICT_INTERVAL", "DURATION",
       "how often the database's plan cache is trimmed to --plan-cache-max-rows", "1m",
       DurationFlag(&ServerConfig::plan_cache_evict_interval_ms, 1000, 86400000), nullptr},
      {"worker-retention", "UCUDNN_WORKER_RETENTION", "DURATION",
       "the catalog's rows of workers without a heartbeat for this long are deleted (checked "
       "every --plan-cache-evict-interval); 0 keeps them for ever",
       "168h", DurationFlag(&ServerConfig::worker_retention_ms, 0, int64_t{3650} * 86400000),
       nullptr},
      {"failed-job-cooldown", "UCUDNN_FAILED_JOB_COOLDOWN", "DURATION",
       "after a problem's benchmark job failed for good, plan requests report it as failed (with "
       "its error) instead of enqueueing it again, for this long; `ucudnn jobs --retry ID` (or "
       "CatalogService.RetryJob with a token) re-queues it sooner; 0 re-enqueues at once",
       "1h", DurationFlag(&ServerConfig::failed_job_cooldown_ms, 0, int64_t{30} * 86400000),
       nullptr},
      {"max-waiting-calls", "UCUDNN_MAX_WAITING_CALLS", "N",
       "plan calls (GetPlan, StreamPlan, ExplainPlan) computing or waiting for benchmarks at once "
       "(a waiting call holds no thread); more are refused with RESOURCE_EXHAUSTED",
       "1024", IntFlag(&ServerConfig::max_blocking_calls, 1, 65536), nullptr},
      {"planner-threads", "UCUDNN_PLANNER_THREADS", "N",
       "threads that do the work of every call (database reads and writes, planning); the "
       "server's thread count does not grow with the calls in flight",
       "8", IntFlag(&ServerConfig::planner_threads, 1, 1024), nullptr},
      {"timings-cache-entries", "UCUDNN_TIMINGS_CACHE_ENTRIES", "N",
       "timing tables kept in process, invalidated by the database's notifications; 0 disables",
       "8192", IntFlag(&ServerConfig::timings_cache_entries, 0, 1 << 24), nullptr},
      {"timings-cache-ttl", "UCUDNN_TIMINGS_CACHE_TTL", "DURATION",
       "re-read a cached timing table at least this often, even without a notification (covers "
       "writes made around the store, e.g. by hand in SQL)",
       "5m", DurationFlag(&ServerConfig::timings_cache_ttl_ms, 0, 86400000), nullptr},
      {"ilp-time-limit", "UCUDNN_ILP_TIME_LIMIT", "DURATION",
       "CBC time limit of one network-wide ILP solve", "10s",
       DurationFlag(&ServerConfig::ilp_time_limit_ms, 10, 600000), nullptr},
      {"start-timeout", "UCUDNN_START_TIMEOUT", "DURATION",
       "at start, keep retrying a database that cannot be reached this long before giving up "
       "(0: give up at once)",
       "60s", DurationFlag(&ServerConfig::start_timeout_ms, 0, 3600000), nullptr},
      {"schema-wait", "UCUDNN_SCHEMA_WAIT", "DURATION",
       "with --no-migrate, at start keep waiting this long for a database schema older than this "
       "binary's (a migration job still running) before giving up (0: give up at once)",
       "5m", DurationFlag(&ServerConfig::schema_wait_ms, 0, 86400000), nullptr},
      {"shutdown-grace", "UCUDNN_SHUTDOWN_GRACE", "DURATION",
       "how long calls in flight may finish after SIGTERM/SIGINT", "10s",
       DurationFlag(&ServerConfig::shutdown_grace_ms, 0, 600000), nullptr},
      {"health-interval", "UCUDNN_HEALTH_INTERVAL", "DURATION",
       "how often the database is probed for grpc.health.v1", "2s",
       DurationFlag(&ServerConfig::health_interval_ms, 100, 600000), nullptr},
      {"search-sizes", "UCUDNN_SEARCH_SIZES", "WHICH",
       "which micro-batch sizes a benchmark job for a per-kernel plan times: all (every size of "
       "the policy) or limit (those the kernels' smallest workspace limit can use, "
       "core/size_rule.h; a smaller limit asks for more later: fewer timings, but on an H200 "
       "slower to know a model, docs/results.md)",
       "all",
       [](ServerConfig& c, std::string_view v, std::string_view where) -> Status {
         if (v != "limit" && v != "all") {
           return InvalidArgument(std::string(where) + ": must be limit or all, got " +
                                  QuoteForError(v));
         }
         c.sizes_for_limit = v == "limit";
         return Status::Ok();
       },
       nullptr},
      {"recheck-interval", "UCUDNN_RECHECK_INTERVAL", "DURATION",
       "while waiting for benchmarks, re-read the database this often even without a "
       "notification",
       "1s", DurationFlag(&ServerConfig::recheck_interval_ms, 50, 600000), nullptr},
  };
  return specs;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

// The flags on a CLI11 app, each applying its value to `config` through its spec (validated,
// errors naming the flag). With `show_env`, each option also names its variable (for --help;
// parsing applies the variables itself, from the EnvLookup, so it stays pure).
void AddFlags(CLI::App& app, ServerConfig& config, bool show_env) {
  // A flag given twice: the last one counts, as with most command-line tools.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const FlagSpec& spec : Specs()) {
    const std::string flag = "--" + std::string(spec.name);
    std::string help(spec.help);
    if (!spec.default_text.empty()) help += " (default: " + std::string(spec.default_text) + ")";
    auto apply = [&config, &spec, flag](std::string_view value) {
      if (Status status = spec.apply(config, value, flag); !status.ok()) {
        throw CLI::ValidationError(status.message());
      }
    };
    CLI::Option* option = nullptr;
    if (spec.metavar.empty()) {
      option = app.add_flag_callback(
                      flag, [apply] { apply(""); }, help)
                   ->disable_flag_override();
    } else if (spec.name == "tokens") {
      // Every --tokens counts, and together they replace the variable's tokens.
      option = app.add_option_function<std::vector<std::string>>(
                      flag,
                      [&config, apply](const std::vector<std::string>& values) {
                        config.tokens.clear();
                        for (const auto& value : values) apply(value);
                      },
                      help)
                   ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
                   ->allow_extra_args(false);
    } else {
      option = app.add_option_function<std::string>(
          flag, [apply](const std::string& value) { apply(value); }, help);
    }
    if (!spec.metavar.empty()) option->type_name(std::string(spec.metavar));
    if (show_env && !spec.env.empty()) option->envname(std::string(spec.env));
  }
}

}  // namespace

Result<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                           const EnvLookup& env) {
  ParsedCommandLine parsed;
  ServerConfig& config = parsed.config;
  // The variables first, so that a flag wins over its variable.
  for (const auto& spec : Specs()) {
    if (spec.env.empty() || !env) continue;
    const auto value = env(std::string(spec.env));
    if (!value) continue;
    const auto& apply = spec.apply_env ? spec.apply_env : spec.apply;
    UCUDNN_RETURN_IF_ERROR(apply(config, *value, spec.env));
  }
  CLI::App app;
  AddFlags(app, config, /*show_env=*/false);
  bool version = false;
  app.add_flag("--version", version, "print the version");
  // CLI11 takes the arguments in reverse order. It reads "--flag=" as a flag without its value
  // (and takes the next argument); "--metrics-listen=" sets an empty value (no endpoint).
  std::vector<std::string> reversed;
  for (auto arg = args.rbegin(); arg != args.rend(); ++arg) {
    if (arg->size() > 3 && arg->starts_with("--") && arg->ends_with('=') &&
        arg->find('=') == arg->size() - 1) {
      reversed.emplace_back();
      reversed.push_back(arg->substr(0, arg->size() - 1));
    } else {
      reversed.push_back(*arg);
    }
  }
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    parsed.action = ParsedCommandLine::Action::kHelp;
    return parsed;
  } catch (const CLI::ParseError& e) {
    // CLI11 names a switch given a value without its dashes ("no-migrate was given a disallowed
    // flag override"); every other message names the flag as typed.
    std::string message = e.what();
    constexpr std::string_view kOverride = " was given a disallowed flag override";
    if (const size_t at = message.find(kOverride); at != std::string::npos) {
      message = "--" + message.substr(0, at) + ": takes no value";
    }
    return InvalidArgument(message + " (see --help)");
  }
  if (version) parsed.action = ParsedCommandLine::Action::kVersion;
  return parsed;
}

Status ValidateConfig(const ServerConfig& config) {
  if (config.database_url.empty()) {
    return InvalidArgument("--database-url (or UCUDNN_DATABASE_URL): required");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key: give both or neither");
  }
  return Status::Ok();
}

Status LoadTokenFile(ServerConfig& config) {
  if (config.token_file.empty()) return Status::Ok();
  UCUDNN_ASSIGN_OR_RETURN(RoleTokens tokens, ReadTokenFile(config.token_file));
  auto append = [](std::vector<std::string>& to, std::vector<std::string>& from) {
    for (auto& t : from) to.push_back(std::move(t));
  };
  append(config.tokens, tokens.admin);
  append(config.plan_tokens, tokens.plan);
  append(config.submit_tokens, tokens.submit);
  append(config.read_tokens, tokens.read);
  return Status::Ok();
}

std::optional<std::chrono::milliseconds> StartRetryDelay(const ServerConfig& config,
                                                         const Status& failure, bool schema_behind,
                                                         std::chrono::milliseconds elapsed,
                                                         int64_t attempt) {
  using std::chrono::milliseconds;
  int64_t limit_ms = 0;
  if (schema_behind) {
    limit_ms = config.schema_wait_ms;
  } else if (failure.code() == StatusCode::kUnavailable) {
    limit_ms = config.start_timeout_ms;
  } else {
    return std::nullopt;
  }
  const milliseconds delay = BackoffDelay(milliseconds(250), milliseconds(5000), attempt);
  // The last try is at the limit itself, not one back-off step before it.
  const milliseconds left = milliseconds(limit_ms) - elapsed;
  if (left <= milliseconds(0)) return std::nullopt;
  return std::min(delay, left);
}

std::string HelpText(std::string_view program) {
  CLI::App app(
      "The ucudnn planner server: plans micro-batched cuDNN convolutions from the timings in "
      "PostgreSQL, enqueues benchmarks for missing ones, and serves ucudnn.v1.PlannerService, "
      "CatalogService and TimingService, grpc.health.v1 and server reflection. Stateless: run "
      "as many replicas on one database as you like.\n\nEvery flag can also be set by its "
      "environment variable (Env); a flag wins over its variable.",
      std::string(program));
  ServerConfig unused;
  AddFlags(app, unused, /*show_env=*/true);
  app.set_help_flag("-h,--help", "print this text");
  bool version = false;
  app.add_flag("--version", version, "print the version");
  return app.help();
}

}  // namespace ucudnn::server
