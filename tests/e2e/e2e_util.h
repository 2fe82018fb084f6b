// Helpers of the end-to-end tests: the real ucudnn-server and ucudnn-worker binaries as child
// processes (each in its own process group, killed with the group when the test ends, also on a
// failed assertion, and by the kernel when the test process dies), gRPC stubs, the tiny network
// the CPU workers benchmark in milliseconds, and row counts straight from PostgreSQL.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::e2e {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The bearer token (role admin) the test servers accept.
inline constexpr const char* kToken = "e2e-token";

// A child process in its own process group, stdout and stderr in a log file. The destructor
// SIGKILLs the whole group and reaps the child; PR_SET_PDEATHSIG kills it if this process dies
// first.
class ChildProcess {
 public:
  // argv[0] is the binary's path. nullptr (and *error set) when fork/exec fails.
  static std::unique_ptr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                             const std::string& log_path, std::string* error);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // To the whole process group.
  void Signal(int signal_number);
  // SIGKILL to the group and reap: the process is gone when this returns.
  void Kill();
  // The wait status once the child exited within `limit`; nullopt while it still runs.
  std::optional<int> WaitExit(milliseconds limit);
  // True while the child has not exited (reaps it when it has).
  bool Running();
  std::string Log() const;
  // The last `bytes` of the log, for failure messages.
  std::string LogTail(size_t bytes = 6000) const;
  const std::string& log_path() const { return log_path_; }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string log_path_;
};

// Paths of the binaries of this build (overridable with UCUDNN_SERVER_BINARY /
// UCUDNN_WORKER_BINARY / UCUDNN_CLI_BINARY, for runs from a bundle).
std::string ServerBinary();
std::string WorkerBinary();
std::string CliBinary();
// `buf` as the README's commands install it (build/tools/node_modules/.bin/buf), for the tests
// that run grpcurl lines through `buf curl`; empty when it is not installed (they skip).
std::string BufBinary();

// A log file path under the test temp dir naming the current test and `what`.
std::string LogPath(const std::string& what);

// ucudnn-server on 127.0.0.1 at a port of its own choosing (--listen 127.0.0.1:0; the port is
// read from its "listening on" log line), metrics disabled, the test token accepted, fast
// health and re-check intervals.
class ServerProcess {
 public:
  static Result<std::unique_ptr<ServerProcess>> Start(const std::string& database_url,
                                                      const std::string& name,
                                                      std::vector<std::string> extra_flags = {});
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  ChildProcess& process() { return *process_; }
  const std::string& name() const { return name_; }

  // Calls carry `token` (the admin token kToken by default; none when empty) unless they set
  // their own authorization metadata: callers without a token may not enqueue benchmarks.
  std::shared_ptr<grpc::Channel> NewChannel(const std::string& token = kToken) const;
  std::unique_ptr<v1::PlannerService::Stub> Planner(const std::string& token = kToken) const;
  std::unique_ptr<v1::CatalogService::Stub> Catalog(const std::string& token = kToken) const;
  std::unique_ptr<v1::TimingService::Stub> Timings(const std::string& token = kToken) const;

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string name_;
  int port_ = 0;
};

// Benchmark settings of a fast worker: tests check bookkeeping, not timings.
std::vector<std::string> FastBenchmarkFlags();

// ucudnn-worker --backend cpu, registered as `prefix`:cpu.
class WorkerProcess {
 public:
  // Returns once the process runs; WaitRegistered() waits for its row in the catalog.
  static Result<std::unique_ptr<WorkerProcess>> Start(const std::string& database_url,
                                                      const std::string& prefix,
                                                      std::vector<std::string> extra_flags);
  std::string worker_id() const { return prefix_ + ":cpu"; }
  ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string prefix_;
};

// Polls `done` every 20 ms for at most `limit`; true when it held. The limit only bounds a hung
// test: it is generous, never a timing assertion.
bool WaitUntil(const std::function<bool()>& done, milliseconds limit = seconds(60));

// A client context with a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(milliseconds timeout);

// The tiny network of the tests: 5 kernels over 4 distinct problems (one problem appears at two
// mini-batch sizes), mini-batch at most 8, so a CPU worker benchmarks each problem in
// milliseconds. `variant` shifts every problem's channel count, giving a network whose problems
// no other variant shares.
std::vector<Kernel> TinyNetwork(int variant = 0);
inline constexpr size_t kTinyNetworkProblems = 4;
// Distinct problems of `kernels`, in first-seen order, each with its largest mini-batch.
std::vector<std::pair<ConvProblem, int64_t>> DistinctProblems(const std::vector<Kernel>& kernels);

// The device of the CPU workers on this machine.
const DeviceFingerprint& CpuDevice();

// A GetPlanRequest for `kernels` on the CPU device, per-kernel mode, power-of-two policy.
v1::GetPlanRequest PlanRequestFor(const std::vector<Kernel>& kernels, uint32_t max_wait_ms,
                                  uint64_t workspace_bytes = 1 << 20);

// Rows of every table of the schema (devices, problems, timings, jobs, workers, plans,
// schema_migrations), read with a direct connection to `database_url`.
Result<std::map<std::string, int64_t>> CountRows(const std::string& database_url);

// The same over one connection kept open (for tests that count after every call).
class RowCounter {
 public:
  explicit RowCounter(std::string database_url);
  ~RowCounter();
  Result<std::map<std::string, int64_t>> Count();

 private:
  struct Connection;
  std::string url_;
  std::unique_ptr<Connection> connection_;
};
// One integer from a query (e.g. "SELECT count(*) FROM jobs WHERE state = 'done'").
Result<int64_t> QueryInt(const std::string& database_url, const std::string& sql);
// "postgresql://postgres@127.0.0.1:5432/ucudnn_test_7" -> "ucudnn_test_7".
std::string DatabaseName(const std::string& database_url);

// "INVALID_ARGUMENT: message" for test output.
std::string Describe(const grpc::Status& status);

}  // namespace ucudnn::e2e
