#include "e2e/e2e_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <pqxx/pqxx>
#include <regex>
#include <sstream>
#include <thread>

#include "support/bearer_channel.h"
#include "support/problems.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::e2e {

// ---- ChildProcess -----------------------------------------------------------------------------

std::unique_ptr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                  const std::string& log_path, std::string* error) {
  if (argv.empty()) {
    *error = "no program";
    return nullptr;
  }
  if (access(argv[0].c_str(), X_OK) != 0) {
    *error = "not an executable: " + argv[0];
    return nullptr;
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls (the test process has gRPC and PostgreSQL threads).
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    *error = "cannot open " + log_path;
    return nullptr;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    *error = "fork failed";
    return nullptr;
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Killed with the test process: a crashed or killed test leaves no servers behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before the first Signal()
  close(log_fd);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->log_path_ = log_path;
  return child;
}

ChildProcess::~ChildProcess() { Kill(); }

void ChildProcess::Signal(int signal_number) {
  if (pid_ > 0 && !exited_) kill(-pid_, signal_number);
}

void ChildProcess::Kill() {
  if (pid_ <= 0 || exited_) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  if (waitpid(pid_, &status_, 0) == pid_) exited_ = true;
}

std::optional<int> ChildProcess::WaitExit(milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!exited_) {
    if (waitpid(pid_, &status_, WNOHANG) == pid_) {
      exited_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return status_;
}

bool ChildProcess::Running() { return !WaitExit(milliseconds(0)).has_value(); }

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ChildProcess::LogTail(size_t bytes) const {
  std::string log = Log();
  if (log.size() > bytes) log = "..." + log.substr(log.size() - bytes);
  return "---- " + log_path_ + " ----\n" + log;
}

// ---- Binaries and logs ------------------------------------------------------------------------

std::string ServerBinary() {
  if (const char* path = std::getenv("UCUDNN_SERVER_BINARY")) return path;
  return std::string(UCUDNN_BINARY_DIR) + "/bin/ucudnn-server";
}

std::string WorkerBinary() {
  if (const char* path = std::getenv("UCUDNN_WORKER_BINARY")) return path;
  return std::string(UCUDNN_BINARY_DIR) + "/bin/ucudnn-worker";
}

std::string CliBinary() {
  if (const char* path = std::getenv("UCUDNN_CLI_BINARY")) return path;
  return std::string(UCUDNN_BINARY_DIR) + "/bin/ucudnn";
}

std::string BufBinary() {
  const std::string buf = std::string(UCUDNN_BINARY_DIR) + "/tools/node_modules/.bin/buf";
  return access(buf.c_str(), X_OK) == 0 ? buf : "";
}

std::string LogPath(const std::string& what) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test =
      info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "global";
  return ::testing::TempDir() + "ucudnn_e2e_" + test + "_" + what + "_" + std::to_string(getpid()) +
         ".log";
}

// ---- ServerProcess ----------------------------------------------------------------------------

Result<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::string& database_url,
                                                            const std::string& name,
                                                            std::vector<std::string> extra_flags) {
  std::vector<std::string> argv = {ServerBinary(),       "--listen",
                                   "127.0.0.1:0",        "--database-url",
                                   database_url,         "--metrics-listen=",
                                   "--tokens",           kToken,
                                   "--log-level",        "info",
                                   "--health-interval",  "200ms",
                                   "--recheck-interval", "200ms",
                                   "--shutdown-grace",   "1s"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  std::string error;
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  server->name_ = name;
  server->process_ = ChildProcess::Spawn(argv, LogPath("server_" + name), &error);
  if (!server->process_) return Unavailable("cannot start ucudnn-server: " + error);
  // "ucudnn-server listening on 127.0.0.1:40123 (...)"
  static const std::regex kListening(R"(listening on [0-9.]+:([0-9]+))");
  const bool up = WaitUntil(
      [&] {
        std::smatch match;
        const std::string log = server->process_->Log();
        if (std::regex_search(log, match, kListening)) {
          server->port_ = std::stoi(match[1].str());
          return true;
        }
        return !server->process_->Running();
      },
      seconds(30));
  if (!up || server->port_ == 0) {
    return Unavailable("ucudnn-server " + name + " did not start listening\n" +
                       server->process_->LogTail());
  }
  return server;
}

std::shared_ptr<grpc::Channel> ServerProcess::NewChannel(const std::string& token) const {
  grpc::ChannelArguments args;
  // A fresh connection per channel: tests that kill a server must not share sub-channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return test_support::ChannelWithToken(address(), token, args);
}

std::unique_ptr<v1::PlannerService::Stub> ServerProcess::Planner(const std::string& token) const {
  return v1::PlannerService::NewStub(NewChannel(token));
}
std::unique_ptr<v1::CatalogService::Stub> ServerProcess::Catalog(const std::string& token) const {
  return v1::CatalogService::NewStub(NewChannel(token));
}
std::unique_ptr<v1::TimingService::Stub> ServerProcess::Timings(const std::string& token) const {
  return v1::TimingService::NewStub(NewChannel(token));
}

// ---- WorkerProcess ----------------------------------------------------------------------------

std::vector<std::string> FastBenchmarkFlags() {
  return {"--warmup-runs", "1", "--min-runs", "1", "--max-runs", "2", "--config-budget-ms", "20"};
}

Result<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(const std::string& database_url,
                                                            const std::string& prefix,
                                                            std::vector<std::string> extra_flags) {
  std::vector<std::string> argv = {
      WorkerBinary(), "--database-url",     database_url, "--backend",
      "cpu",          "--worker-id-prefix", prefix,       "--heartbeat-seconds",
      "0.5",          "--poll-seconds",     "0.1",        "--log-level",
      "info"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  std::string error;
  auto worker = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  worker->prefix_ = prefix;
  worker->process_ = ChildProcess::Spawn(argv, LogPath("worker_" + prefix), &error);
  if (!worker->process_) return Unavailable("cannot start ucudnn-worker: " + error);
  return worker;
}

// ---- Waiting, calls ---------------------------------------------------------------------------

bool WaitUntil(const std::function<bool()>& done, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return done();
}

std::unique_ptr<grpc::ClientContext> ContextWithDeadline(milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

std::string Describe(const grpc::Status& status) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int code = static_cast<int>(status.error_code());
  const std::string name = code >= 0 && code <= 16 ? kNames[code] : std::to_string(code);
  return name + ": " + status.error_message();
}

// ---- The tiny network -------------------------------------------------------------------------

std::vector<Kernel> TinyNetwork(int variant) {
  using test_support::SquareConv;
  const int64_t v = variant;
  std::vector<Kernel> kernels = {
      {SquareConv(ConvOp::kForward, 3 + v, 12, 8, 3, 1), 8, "conv1/fwd"},
      {SquareConv(ConvOp::kBackwardData, 8 + v, 8, 8, 3, 1), 8, "conv2/bwd_data"},
      {SquareConv(ConvOp::kBackwardFilter, 8 + v, 8, 16, 1, 1), 8, "conv3/bwd_filter"},
      {SquareConv(ConvOp::kForward, 8 + v, 8, 8, 3, 2), 8, "conv4/fwd"},
      // conv1 again at a smaller mini-batch: the same problem, no second job.
      {SquareConv(ConvOp::kForward, 3 + v, 12, 8, 3, 1), 4, "conv1/fwd/half"},
  };
  return kernels;
}

std::vector<std::pair<ConvProblem, int64_t>> DistinctProblems(const std::vector<Kernel>& kernels) {
  std::vector<std::pair<ConvProblem, int64_t>> out;
  for (const auto& k : kernels) {
    bool found = false;
    for (auto& [p, batch] : out) {
      if (p == k.problem) {
        batch = std::max(batch, k.mini_batch);
        found = true;
      }
    }
    if (!found) out.emplace_back(k.problem, k.mini_batch);
  }
  return out;
}

const DeviceFingerprint& CpuDevice() {
  static const DeviceFingerprint device = CpuFingerprint();
  return device;
}

v1::GetPlanRequest PlanRequestFor(const std::vector<Kernel>& kernels, uint32_t max_wait_ms,
                                  uint64_t workspace_bytes) {
  v1::GetPlanRequest request;
  *request.mutable_device() = ToProto(CpuDevice());
  for (const auto& k : kernels) *request.add_kernels() = ToProto(k);
  request.set_policy(v1::BATCH_POLICY_POWER_OF_TWO);
  request.set_workspace_mode(v1::WORKSPACE_MODE_PER_KERNEL);
  request.set_workspace_bytes(workspace_bytes);
  request.set_max_wait_ms(max_wait_ms);
  return request;
}

// ---- Direct database reads --------------------------------------------------------------------

namespace {

Result<std::map<std::string, int64_t>> CountRowsOn(pqxx::connection& connection) {
  static const char* kTables[] = {"devices", "problems", "timings",          "jobs",
                                  "workers", "plans",    "schema_migrations"};
  try {
    pqxx::nontransaction tx(connection);
    std::map<std::string, int64_t> counts;
    for (const char* table : kTables) {
      counts[table] = tx.exec1(std::string("SELECT count(*) FROM ") + table)[0].as<int64_t>();
    }
    return counts;
  } catch (const std::exception& e) {
    return Unavailable(std::string("counting rows: ") + e.what());
  }
}

}  // namespace

Result<std::map<std::string, int64_t>> CountRows(const std::string& database_url) {
  try {
    pqxx::connection connection(database_url);
    return CountRowsOn(connection);
  } catch (const std::exception& e) {
    return Unavailable(std::string("counting rows: ") + e.what());
  }
}

struct RowCounter::Connection {
  explicit Connection(const std::string& url) : connection(url) {}
  pqxx::connection connection;
};

RowCounter::RowCounter(std::string database_url) : url_(std::move(database_url)) {}
RowCounter::~RowCounter() = default;

Result<std::map<std::string, int64_t>> RowCounter::Count() {
  try {
    if (!connection_ || !connection_->connection.is_open()) {
      connection_ = std::make_unique<Connection>(url_);
    }
    auto counts = CountRowsOn(connection_->connection);
    if (!counts.ok()) connection_.reset();
    return counts;
  } catch (const std::exception& e) {
    connection_.reset();
    return Unavailable(std::string("counting rows: ") + e.what());
  }
}

Result<int64_t> QueryInt(const std::string& database_url, const std::string& sql) {
  try {
    pqxx::connection connection(database_url);
    pqxx::nontransaction tx(connection);
    return tx.exec1(sql)[0].as<int64_t>();
  } catch (const std::exception& e) {
    return Unavailable("'" + sql + "': " + e.what());
  }
}

std::string DatabaseName(const std::string& database_url) {
  std::string name = database_url.substr(database_url.rfind('/') + 1);
  return name.substr(0, name.find('?'));
}

}  // namespace ucudnn::e2e
