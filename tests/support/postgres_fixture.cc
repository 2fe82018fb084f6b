#include "support/postgres_fixture.h"

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <pqxx/pqxx>
#include <sstream>
#include <thread>
#include <vector>

namespace ucudnn::test_support {

// The user PostgreSQL runs as; -1: this process's own.
struct Identity {
  int uid = -1;
  int gid = -1;
};

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTestUser = "ucudnn-test";
constexpr const char* kDirPrefix = "ucudnn-pg-";
// Not matched by kDirPrefix, so stale-directory clean-up leaves templates alone.
constexpr const char* kTemplatePrefix = "ucudnn-pgtemplate-";
// 1 MiB WAL segments instead of 16: a smaller data directory to create and copy.
constexpr const char* kWalSegmentOption = "--wal-segsize=1";

// The running postmaster, for the crash handlers (async-signal-safe access only).
std::atomic<pid_t> g_postmaster{0};

struct sigaction g_previous[32];
constexpr int kFatalSignals[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT};

void KillPostgresAndReraise(int sig) {
  const pid_t pid = g_postmaster.exchange(0);
  if (pid > 0) kill(pid, SIGQUIT);  // immediate shutdown; children follow the postmaster
  sigaction(sig, &g_previous[sig], nullptr);
  raise(sig);
}

void InstallCrashHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : kFatalSignals) {
      struct sigaction action {};
      action.sa_handler = KillPostgresAndReraise;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESETHAND;
      sigaction(sig, &action, &g_previous[sig]);
    }
  });
}

bool IsExecutable(const fs::path& p) { return access(p.c_str(), X_OK) == 0; }

std::string FindBindir() {
  if (const char* env = std::getenv("UCUDNN_PG_BINDIR")) return env;
  if (FILE* pipe = popen("pg_config --bindir 2>/dev/null", "r")) {
    char line[512] = {};
    const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
    pclose(pipe);
    std::string dir = got ? std::string(line) : std::string();
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == ' ')) dir.pop_back();
    if (!dir.empty() && IsExecutable(fs::path(dir) / "initdb")) return dir;
  }
  return "/usr/lib/postgresql/15/bin";
}

// Forks and execs argv (argv[0] a path) with stdout/stderr appended to `log`, as `who` when set.
// `die_with_parent`: the child gets SIGQUIT if this thread dies (a crashed or killed test).
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log,
                    const Identity& who, bool die_with_parent) {
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "TZ=UTC"};
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Internal("open " + log + ": " + std::strerror(errno));
  if (who.uid >= 0 && fchown(log_fd, who.uid, who.gid) != 0) {
    close(log_fd);
    return Internal("chown " + log + ": " + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (who.uid >= 0) {
      if (setgroups(0, nullptr) != 0 || setgid(who.gid) != 0 || setuid(who.uid) != 0) _exit(126);
    }
    // After setuid, which clears the parent-death signal.
    if (die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGQUIT);
      if (getppid() != parent) _exit(125);  // the parent is already gone
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  return pid;
}

// Waits for `pid` up to `timeout`; its exit status, or -1 on timeout.
int WaitFor(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return 0;  // not our child any more
    if (Clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<Identity> UnprivilegedIdentity() {
  if (geteuid() != 0) return Identity{};
  // Test processes start side by side (ctest -j) and would all run useradd at once on a fresh
  // machine; concurrent useradds can leave a user that getpwnam saw but that is gone (or not
  // yet written) when initdb looks itself up. One at a time, under an exclusive lock.
  const std::string lock_path = (fs::temp_directory_path() / "ucudnn-test-useradd.lock").string();
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return Internal("open " + lock_path + ": " + std::strerror(errno));
  while (flock(lock_fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  passwd* pw = getpwnam(kTestUser);
  if (pw == nullptr) {
    const std::string cmd = std::string("useradd --system --no-create-home --user-group ") +
                            "--shell /usr/sbin/nologin " + kTestUser + " >/dev/null 2>&1";
    [[maybe_unused]] int rc = std::system(cmd.c_str());
    pw = getpwnam(kTestUser);
  }
  Identity who;
  if (pw != nullptr) who = Identity{static_cast<int>(pw->pw_uid), static_cast<int>(pw->pw_gid)};
  close(lock_fd);  // releases the lock
  if (who.uid < 0 || getpwuid(static_cast<uid_t>(who.uid)) == nullptr) {
    return Unavailable(std::string("running as root and user ") + kTestUser +
                       " is missing and could not be created with useradd; PostgreSQL "
                       "refuses to run as root");
  }
  return who;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Directories of earlier test binaries that were killed before cleaning up.
void RemoveStaleDirectories() {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kDirPrefix, 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + std::strlen(kDirPrefix));
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

std::string SafeName(std::string_view hint) {
  std::string out;
  for (char ch : hint) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
    if (out.size() >= 40) break;
  }
  return out;
}

// Runs a command to completion; true when it exited with 0.
bool RunToCompletion(const std::vector<std::string>& args, const std::string& log,
                     const Identity& who, std::chrono::seconds timeout) {
  Result<pid_t> pid = Spawn(args, log, who, /*die_with_parent=*/true);
  if (!pid.ok()) return false;
  const int status = WaitFor(*pid, timeout);
  if (status == -1) {
    kill(*pid, SIGKILL);
    WaitFor(*pid, std::chrono::seconds(10));
    return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string CopyCommand() { return IsExecutable("/usr/bin/cp") ? "/usr/bin/cp" : "/bin/cp"; }

// A freshly initialised data directory, kept in the temporary directory so that later test
// processes copy it (a fraction of a second) instead of running initdb (about a second each;
// ctest runs every test case in its own process). Keyed by user and the initdb binary.
std::string TemplatePath(const std::string& bindir, int uid) {
  std::error_code ec;
  const auto stamp = fs::last_write_time(fs::path(bindir) / "initdb", ec);
  const uint64_t key =
      std::hash<std::string>()(bindir + "|" + kWalSegmentOption + "|" +
                               std::to_string(ec ? 0 : stamp.time_since_epoch().count()));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  return (fs::temp_directory_path() /
          (std::string(kTemplatePrefix) + std::to_string(uid < 0 ? getuid() : uid) + "-" + hex))
      .string();
}

}  // namespace

// ---- PostgresServer ----------------------------------------------------------------------------

Result<std::unique_ptr<PostgresServer>> PostgresServer::Launch() {
  InstallCrashHandlers();
  RemoveStaleDirectories();
  std::unique_ptr<PostgresServer> server(new PostgresServer());
  server->bindir_ = FindBindir();
  for (const char* tool : {"initdb", "postgres"}) {
    if (!IsExecutable(fs::path(server->bindir_) / tool)) {
      return Unavailable(std::string("PostgreSQL 15 server binaries not found (no ") + tool +
                         " in " + server->bindir_ +
                         "; install postgresql-15 or set UCUDNN_PG_BINDIR)");
    }
  }
  UCUDNN_ASSIGN_OR_RETURN(Identity who, UnprivilegedIdentity());
  server->uid_ = who.uid;
  server->gid_ = who.gid;

  std::string pattern =
      (fs::temp_directory_path() / (std::string(kDirPrefix) + std::to_string(getpid()) + "-XXXXXX"))
          .string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return Internal("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  server->dir_ = pattern;
  server->log_path_ = server->dir_ + "/server.log";
  if (who.uid >= 0 && chown(server->dir_.c_str(), who.uid, who.gid) != 0) {
    return Internal("chown " + server->dir_ + ": " + std::strerror(errno));
  }

  const auto init_start = Clock::now();
  UCUDNN_ASSIGN_OR_RETURN(const bool from_template, server->InitDataDirectory(who));
  const double init_s = std::chrono::duration<double>(Clock::now() - init_start).count();

  // The port chosen may be taken by someone else before postgres binds it: try a few.
  Status started;
  for (int attempt = 0; attempt < 5; ++attempt) {
    server->port_ = FreePort();
    started = server->StartOnce();
    if (started.ok()) break;
  }
  if (!started.ok()) return started;
  std::fprintf(stderr, "[postgres] test cluster at %s, port %d (%s %.1f s)\n", server->dir_.c_str(),
               server->port_, from_template ? "copied from template" : "initdb", init_s);
  return server;
}

Result<bool> PostgresServer::InitDataDirectory(const Identity& who) {
  const std::string data = dir_ + "/data";
  const std::string templ = TemplatePath(bindir_, who.uid);
  std::error_code ec;
  if (fs::exists(templ + "/PG_VERSION", ec)) {
    // cp -a keeps owner and modes (0700, as postgres demands).
    if (RunToCompletion({CopyCommand(), "-a", templ, data}, log_path_, Identity{},
                        std::chrono::seconds(60))) {
      return true;
    }
    fs::remove_all(data, ec);  // fall back to initdb
  }
  if (!RunToCompletion({bindir_ + "/initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E",
                        "UTF8", "--locale=C", "--no-sync", kWalSegmentOption},
                       log_path_, who, std::chrono::seconds(120))) {
    return Unavailable("initdb failed:\n" + LogTail());
  }
  // Publish a template for the next test processes: copy, then an atomic rename; whoever loses
  // a race removes its copy.
  const std::string staging = dir_ + "/template";
  if (RunToCompletion({CopyCommand(), "-a", data, staging}, log_path_, Identity{},
                      std::chrono::seconds(60))) {
    if (std::rename(staging.c_str(), templ.c_str()) != 0) fs::remove_all(staging, ec);
  }
  return false;
}

PostgresServer::~PostgresServer() {
  (void)Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status PostgresServer::StartOnce() {
  UCUDNN_ASSIGN_OR_RETURN(pid_t pid,
                          Spawn({bindir_ + "/postgres",
                                 "-D",
                                 dir_ + "/data",
                                 "-k",
                                 dir_,
                                 "-h",
                                 "127.0.0.1",
                                 "-p",
                                 std::to_string(port_),
                                 "-c",
                                 "fsync=off",
                                 "-c",
                                 "synchronous_commit=off",
                                 "-c",
                                 "full_page_writes=off",
                                 "-c",
                                 "max_connections=200",
                                 "-c",
                                 "shared_buffers=32MB",
                                 "-c",
                                 "log_min_messages=warning",
                                 "-c",
                                 "log_min_error_statement=panic"},
                                log_path_, Identity{uid_, gid_}, /*die_with_parent=*/true));
  pid_ = pid;
  g_postmaster = pid;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid_ = 0;
      g_postmaster = 0;
      return Unavailable("postgres exited during start-up:\n" + LogTail());
    }
    try {
      pqxx::connection probe(UrlFor("postgres"));
      return Status::Ok();
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  (void)Stop();
  return Unavailable("postgres did not accept connections within 60 s:\n" + LogTail());
}

Status PostgresServer::Start() {
  if (running()) return Status::Ok();
  return StartOnce();
}

Status PostgresServer::Stop() {
  if (!running()) return Status::Ok();
  const pid_t pid = pid_;
  kill(pid, SIGINT);  // fast shutdown: disconnects clients, no waiting for them
  int status = WaitFor(pid, std::chrono::seconds(30));
  if (status == -1) {
    kill(pid, SIGKILL);
    WaitFor(pid, std::chrono::seconds(10));
  }
  pid_ = 0;
  g_postmaster = 0;
  return Status::Ok();
}

Status PostgresServer::Restart() {
  UCUDNN_RETURN_IF_ERROR(Stop());
  return Start();
}

std::string PostgresServer::UrlFor(std::string_view database) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + std::string(database);
}

Result<std::string> PostgresServer::CreateDatabase(std::string_view hint) {
  std::string name = "t" + std::to_string(getpid()) + "_" + std::to_string(++database_counter_);
  const std::string safe = SafeName(hint);
  if (!safe.empty()) name += "_" + safe;
  try {
    pqxx::connection admin(UrlFor("postgres"));
    pqxx::nontransaction tx(admin);
    tx.exec("CREATE DATABASE " + tx.quote_name(name));  // a name cannot be a bound parameter
  } catch (const std::exception& e) {
    return Unavailable(std::string("CREATE DATABASE ") + name + ": " + e.what());
  }
  return UrlFor(name);
}

Status PostgresServer::Execute(std::string_view database, const std::string& sql) {
  try {
    pqxx::connection conn(UrlFor(database));
    pqxx::nontransaction tx(conn);
    tx.exec(sql);
    return Status::Ok();
  } catch (const std::exception& e) {
    return Internal(std::string("execute: ") + e.what());
  }
}

std::string PostgresServer::LogTail(size_t bytes) const {
  std::ifstream in(log_path_, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

// ---- Shared server -----------------------------------------------------------------------------

namespace {

std::mutex g_shared_mu;
std::unique_ptr<PostgresServer> g_shared;
Status g_shared_error;
bool g_shared_tried = false;

// Stops the shared server when the tests end (before static destruction, while gtest still
// reports), also when tests failed.
class PostgresEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard lock(g_shared_mu);
    g_shared.reset();
  }
};

[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

}  // namespace

PostgresServer* SharedPostgres(Status* error) {
  std::lock_guard lock(g_shared_mu);
  if (!g_shared_tried) {
    g_shared_tried = true;
    auto launched = PostgresServer::Launch();
    if (launched.ok()) {
      g_shared = std::move(launched).value();
    } else {
      g_shared_error = launched.status();
    }
  }
  if (g_shared == nullptr && error != nullptr) {
    *error = g_shared_error.ok() ? Unavailable("the test PostgreSQL was already stopped")
                                 : g_shared_error;
  }
  return g_shared.get();
}

void PostgresTest::SetUp() {
  Status error;
  server_ = SharedPostgres(&error);
  ASSERT_NE(server_, nullptr) << "cannot start the test PostgreSQL: " << error.ToString();
  if (!server_->running()) {
    // A fault test that failed midway may have left it stopped.
    Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto url = server_->CreateDatabase(info != nullptr ? info->name() : "");
  ASSERT_TRUE(url.ok()) << url.status().ToString() << "\n" << server_->LogTail();
  url_ = *url;
}

}  // namespace ucudnn::test_support
