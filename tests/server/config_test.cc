#include "ucudnn/server/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <gtest/gtest.h>

namespace ucudnn::server {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigTest, DefaultsWithoutFlagsOrEnvironment) {
  auto parsed = ParseCommandLine({}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->action, ParsedCommandLine::Action::kRun);
  EXPECT_EQ(parsed->config.listen, "127.0.0.1:50051");
  EXPECT_EQ(parsed->config.metrics_listen, "127.0.0.1:9464");
  EXPECT_TRUE(parsed->config.auto_migrate);
  EXPECT_EQ(parsed->config.max_kernels, 4096);
  EXPECT_EQ(parsed->config.max_message_bytes, 16 << 20);
  // No database URL: the configuration is incomplete.
  EXPECT_EQ(ValidateConfig(parsed->config).code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, EnvironmentThenFlagsWin) {
  auto parsed = ParseCommandLine(
      {"--listen", "0.0.0.0:6000", "--db-pool-size=3", "--no-migrate", "--tokens", "x,y"},
      FakeEnv({{"UCUDNN_LISTEN", "127.0.0.1:7000"},
               {"UCUDNN_DATABASE_URL", "postgresql://u:secret@db/ucudnn"},
               {"UCUDNN_TOKENS", "from-env"},
               {"UCUDNN_LOG_LEVEL", "debug"},
               {"UCUDNN_METRICS_LISTEN", ""},
               {"UCUDNN_MAX_KERNELS", "100"},
               {"UCUDNN_MAX_MESSAGE_BYTES", "4MiB"},
               {"UCUDNN_ILP_TIME_LIMIT", "2500ms"}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const ServerConfig& c = parsed->config;
  EXPECT_EQ(c.listen, "0.0.0.0:6000");
  EXPECT_EQ(c.database_url, "postgresql://u:secret@db/ucudnn");
  EXPECT_EQ(c.tokens, (std::vector<std::string>{"x", "y"}));  // the flag replaced the variable
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.metrics_listen, "");  // empty disables the endpoint
  EXPECT_FALSE(c.auto_migrate);
  EXPECT_EQ(c.db_pool_size, 3);
  EXPECT_EQ(c.max_kernels, 100);
  EXPECT_EQ(c.max_message_bytes, 4 << 20);
  EXPECT_EQ(c.ilp_time_limit_ms, 2500);
  EXPECT_TRUE(ValidateConfig(c).ok());
  // "--flag=" gives the empty value; "--flag value" and "--flag=value" the value.
  auto empty = ParseCommandLine({"--metrics-listen=", "--start-timeout", "5s"}, FakeEnv({}));
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->config.metrics_listen, "");
  EXPECT_EQ(empty->config.start_timeout_ms, 5000);
  // Every --tokens counts.
  auto tokens = ParseCommandLine({"--tokens", "a", "--tokens=b,c"}, FakeEnv({}));
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->config.tokens, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(ConfigTest, AutoMigrateVariable) {
  auto off = ParseCommandLine({}, FakeEnv({{"UCUDNN_AUTO_MIGRATE", "0"}}));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->config.auto_migrate);
  auto bad = ParseCommandLine({}, FakeEnv({{"UCUDNN_AUTO_MIGRATE", "maybe"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("UCUDNN_AUTO_MIGRATE"), std::string::npos);
}

TEST(ConfigTest, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const Case cases[] = {
      {{"--db-pool-size", "0"}, "--db-pool-size"},
      {{"--db-pool-size=abc"}, "--db-pool-size"},
      {{"--max-kernels", "5000"}, "--max-kernels"},
      {{"--listen", "nohostport"}, "--listen"},
      {{"--listen", "host:99999"}, "--listen"},
      {{"--metrics-listen", "x"}, "--metrics-listen"},
      {{"--log-level", "loud"}, "--log-level"},
      {{"--max-message-bytes", "1"}, "--max-message-bytes"},
      {{"--ilp-time-limit", "forever"}, "--ilp-time-limit"},
      {{"--search-sizes", "some"}, "--search-sizes"},
      {{"--no-migrate=1"}, "--no-migrate"},
      {{"--listen"}, "--listen"},
      {{"--frobnicate"}, "--frobnicate"},
      {{"positional"}, "positional"},
  };
  for (const auto& c : cases) {
    auto parsed = ParseCommandLine(c.args, FakeEnv({}));
    ASSERT_FALSE(parsed.ok()) << c.args[0];
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.expected), std::string::npos)
        << parsed.status().message();
  }
}

TEST(ConfigTest, SearchSizesChoosesWhatAPerKernelJobTimes) {
  auto parsed = ParseCommandLine({}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->config.sizes_for_limit);  // the default: every size of the policy
  parsed = ParseCommandLine({"--search-sizes", "limit"}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->config.sizes_for_limit);
  parsed = ParseCommandLine({}, FakeEnv({{"UCUDNN_SEARCH_SIZES", "limit"}}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->config.sizes_for_limit);
  parsed = ParseCommandLine({"--search-sizes", "all"}, FakeEnv({{"UCUDNN_SEARCH_SIZES", "limit"}}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->config.sizes_for_limit);  // the flag wins
}

TEST(ConfigTest, HelpAndVersion) {
  auto help = ParseCommandLine({"--db-pool-size", "2", "--help"}, FakeEnv({}));
  ASSERT_TRUE(help.ok());
  EXPECT_EQ(help->action, ParsedCommandLine::Action::kHelp);
  auto version = ParseCommandLine({"--version"}, FakeEnv({}));
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->action, ParsedCommandLine::Action::kVersion);
  const std::string text = HelpText("ucudnn-server");
  for (const char* expected :
       {"--listen", "UCUDNN_LISTEN", "--database-url", "UCUDNN_DATABASE_URL", "--tokens",
        "--token-file", "--tls-cert", "--tls-key", "--log-level", "--metrics-listen",
        "--no-migrate", "UCUDNN_AUTO_MIGRATE", "--db-pool-size", "--max-kernels"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected;
  }
}

// Every flag of the server, with its variable (the README's configuration reference).
constexpr std::pair<const char*, const char*> kFlags[] = {
    {"--listen", "UCUDNN_LISTEN"},
    {"--database-url", "UCUDNN_DATABASE_URL"},
    {"--tokens", "UCUDNN_TOKENS"},
    {"--token-file", "UCUDNN_TOKEN_FILE"},
    {"--anonymous-role", "UCUDNN_ANONYMOUS_ROLE"},
    {"--tls-cert", "UCUDNN_TLS_CERT"},
    {"--tls-key", "UCUDNN_TLS_KEY"},
    {"--log-level", "UCUDNN_LOG_LEVEL"},
    {"--metrics-listen", "UCUDNN_METRICS_LISTEN"},
    {"--no-migrate", "UCUDNN_AUTO_MIGRATE"},
    {"--db-pool-size", "UCUDNN_DB_POOL_SIZE"},
    {"--max-kernels", "UCUDNN_MAX_KERNELS"},
    {"--max-message-bytes", "UCUDNN_MAX_MESSAGE_BYTES"},
    {"--plan-cache-entries", "UCUDNN_PLAN_CACHE_ENTRIES"},
    {"--plan-cache-max-rows", "UCUDNN_PLAN_CACHE_MAX_ROWS"},
    {"--plan-cache-evict-interval", "UCUDNN_PLAN_CACHE_EVICT_INTERVAL"},
    {"--worker-retention", "UCUDNN_WORKER_RETENTION"},
    {"--failed-job-cooldown", "UCUDNN_FAILED_JOB_COOLDOWN"},
    {"--max-waiting-calls", "UCUDNN_MAX_WAITING_CALLS"},
    {"--planner-threads", "UCUDNN_PLANNER_THREADS"},
    {"--timings-cache-entries", "UCUDNN_TIMINGS_CACHE_ENTRIES"},
    {"--timings-cache-ttl", "UCUDNN_TIMINGS_CACHE_TTL"},
    {"--ilp-time-limit", "UCUDNN_ILP_TIME_LIMIT"},
    {"--search-sizes", "UCUDNN_SEARCH_SIZES"},
    {"--start-timeout", "UCUDNN_START_TIMEOUT"},
    {"--schema-wait", "UCUDNN_SCHEMA_WAIT"},
    {"--shutdown-grace", "UCUDNN_SHUTDOWN_GRACE"},
    {"--health-interval", "UCUDNN_HEALTH_INTERVAL"},
    {"--recheck-interval", "UCUDNN_RECHECK_INTERVAL"},
};

// The line of `help` that introduces `flag` ("  --listen HOST:PORT (Env:UCUDNN_LISTEN)").
std::string FlagLine(const std::string& help, const std::string& flag) {
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(flag);
    if (at != std::string::npos && at == line.find_first_not_of(' ') &&
        (line.size() == at + flag.size() || line[at + flag.size()] == ' ')) {
      return line;
    }
  }
  return "";
}

// `ucudnn-server --help`, the binary itself: every flag, each with its variable, and every
// flag it lists is one of these (a new flag gets its variable and a line in the README).
TEST(ConfigTest, HelpOfTheBinaryListsEveryFlagWithItsVariable) {
  const std::string command = std::string(UCUDNN_BINARY_DIR) + "/bin/ucudnn-server --help";
  std::string help;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    ASSERT_NE(pipe, nullptr) << command;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe.get())) > 0;) help.append(buffer, n);
  }
  EXPECT_EQ(help, HelpText("ucudnn-server"));
  for (const auto& [flag, env] : kFlags) {
    const std::string line = FlagLine(help, flag);
    ASSERT_FALSE(line.empty()) << flag << " is not in --help:\n" << help;
    EXPECT_NE(line.find(std::string("(Env:") + env + ")"), std::string::npos) << line;
  }
  std::istringstream lines(help);
  int listed = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) != 0 || line.rfind("  --help", 0) == 0 ||
        line.rfind("  --version", 0) == 0) {
      continue;
    }
    ++listed;
  }
  EXPECT_EQ(listed, static_cast<int>(std::size(kFlags))) << help;
  // deploy/validate.py reads these defaults from --help.
  EXPECT_NE(FlagLine(help, "--start-timeout").find("--start-timeout"), std::string::npos);
  EXPECT_NE(help.find("(default: 60s)"), std::string::npos);
  EXPECT_NE(help.find("(default: 5m)"), std::string::npos);
}

TEST(ConfigTest, TlsNeedsCertAndKey) {
  auto parsed = ParseCommandLine({"--database-url", "host=x", "--tls-cert", "c.pem"}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(ValidateConfig(parsed->config).code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, TokenFileAddsTokens) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("ucudnn-tokens-" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(path);
    out << "# operators\n  alpha  \n\nbeta\n";
  }
  auto parsed = ParseCommandLine({"--tokens", "gamma", "--token-file", path.string()}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok());
  ServerConfig config = parsed->config;
  ASSERT_TRUE(LoadTokenFile(config).ok());
  EXPECT_EQ(config.tokens, (std::vector<std::string>{"gamma", "alpha", "beta"}));
  std::filesystem::remove(path);
  config.token_file = path.string();
  EXPECT_EQ(LoadTokenFile(config).code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, StartRetriesAnUnreachableDatabaseAndAnOlderSchemaEachUpToItsOwnLimit) {
  using std::chrono::milliseconds;
  auto parsed = ParseCommandLine({"--start-timeout", "10s", "--schema-wait", "2m"}, FakeEnv({}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const ServerConfig& config = parsed->config;
  EXPECT_EQ(config.schema_wait_ms, 120000);
  const Status unreachable = Unavailable("database: connection refused");
  const Status older = FailedPrecondition("database schema version 0 is older than this binary's");
  // The delay starts at 250 ms and doubles with each retry (attempt 0, 1, ...) up to 5 s.
  EXPECT_EQ(StartRetryDelay(config, unreachable, false, milliseconds(0), 0), milliseconds(250));
  EXPECT_EQ(StartRetryDelay(config, unreachable, false, milliseconds(300), 1), milliseconds(500));
  EXPECT_EQ(StartRetryDelay(config, older, true, milliseconds(30000), 5), milliseconds(5000));
  // Each kind of wait ends at its own limit: the database's at 10 s, the schema's at 2 min; the
  // last try is at the limit itself.
  EXPECT_EQ(StartRetryDelay(config, unreachable, false, milliseconds(9900), 1), milliseconds(100));
  EXPECT_EQ(StartRetryDelay(config, unreachable, false, milliseconds(10000), 1), std::nullopt);
  EXPECT_EQ(StartRetryDelay(config, older, true, milliseconds(60000), 6), milliseconds(5000));
  EXPECT_EQ(StartRetryDelay(config, older, true, milliseconds(119000), 6), milliseconds(1000));
  EXPECT_EQ(StartRetryDelay(config, older, true, milliseconds(120000), 6), std::nullopt);
  // --start-timeout 3s waits 3 s in all (issue 22: it gave up after 1.75 s of back-off).
  auto short_wait = ParseCommandLine({"--start-timeout", "3s"}, FakeEnv({}));
  ASSERT_TRUE(short_wait.ok());
  milliseconds waited(0);
  int64_t attempt = 0;
  while (const auto delay =
             StartRetryDelay(short_wait->config, unreachable, false, waited, attempt++)) {
    waited += *delay;
  }
  EXPECT_EQ(waited, milliseconds(3000));
  // Anything else is final at once: an address in use, a schema too new, bad TLS files.
  EXPECT_EQ(StartRetryDelay(config, FailedPrecondition("cannot listen on 127.0.0.1:50051"), false,
                            milliseconds(0), 0),
            std::nullopt);
  // --schema-wait 0 gives up on an older schema at once.
  auto no_wait = ParseCommandLine({"--schema-wait", "0"}, FakeEnv({}));
  ASSERT_TRUE(no_wait.ok());
  EXPECT_EQ(StartRetryDelay(no_wait->config, older, true, milliseconds(0), 0), std::nullopt);
  EXPECT_EQ(ParseCommandLine({"--schema-wait", "forever"}, FakeEnv({})).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ucudnn::server
