// ucudnn-server: the planner server. All logic is in ucudnn::server; this file parses the
// command line, sets up logging and signals, and runs the server until SIGTERM/SIGINT.
#include <absl/synchronization/mutex.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "ucudnn/core/logging.h"
#include "ucudnn/core/stop_signals.h"
#include "ucudnn/server/config.h"
#include "ucudnn/server/server.h"

namespace {

constexpr const char* kVersion = "0.1.0";

// What SIGTERM/SIGINT (StopSignals' watcher thread) tells main: a signal came, and the server to
// shut down once there is one.
struct StopState {
  std::mutex mu;
  std::condition_variable cv;
  int signal = 0;
  ucudnn::server::PlannerServer* server = nullptr;
  std::chrono::milliseconds grace{0};
};

// The configuration to run with, or the exit code when there is nothing to run (help, version,
// a bad flag, a token file that cannot be read, an invalid configuration).
std::variant<int, ucudnn::server::ServerConfig> ConfigFromCommandLine(int argc, char** argv) {
  using namespace ucudnn::server;
  const std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = ParseCommandLine(args, ProcessEnv());
  if (!parsed.ok()) {
    std::fprintf(stderr, "ucudnn-server: %s\n", parsed.status().message().c_str());
    return 2;
  }
  if (parsed->action == ParsedCommandLine::Action::kHelp) {
    std::fputs(HelpText("ucudnn-server").c_str(), stdout);
    return 0;
  }
  if (parsed->action == ParsedCommandLine::Action::kVersion) {
    std::printf("ucudnn-server %s\n", kVersion);
    return 0;
  }
  ServerConfig config = std::move(parsed->config);
  ucudnn::Status status = LoadTokenFile(config);
  if (status.ok()) status = ValidateConfig(config);
  if (!status.ok()) {
    std::fprintf(stderr, "ucudnn-server: %s\n", status.message().c_str());
    return 2;
  }
  return config;
}

const char* SignalName(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

// The started server. A database that is not up yet (a fresh deployment, a restart), or whose
// schema a migration job has not brought up to date yet, is waited for, not fatal. Null when
// start failed for good or a signal came while waiting (both logged).
std::unique_ptr<ucudnn::server::PlannerServer> StartWhenTheDatabaseIsReady(
    const ucudnn::server::ServerConfig& config, StopState& stop) {
  using namespace ucudnn::server;
  const auto first_try = std::chrono::steady_clock::now();
  int64_t retries = 0;
  bool schema_behind = false;
  auto server = PlannerServer::Start(config, &schema_behind);
  while (!server.ok()) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - first_try);
    const auto delay = StartRetryDelay(config, server.status(), schema_behind, elapsed, retries++);
    if (!delay) break;
    spdlog::warn("{}; retrying in {} ms", server.status().ToString(), delay->count());
    {
      std::unique_lock lock(stop.mu);
      if (stop.cv.wait_for(lock, *delay, [&] { return stop.signal != 0; })) {
        spdlog::info("signal received while starting; exiting");
        return nullptr;
      }
    }
    server = PlannerServer::Start(config, &schema_behind);
  }
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return nullptr;
  }
  return std::move(*server);
}

// Serves until SIGTERM/SIGINT has shut the server down (or did before it was handed over).
void ServeUntilStopped(ucudnn::server::PlannerServer& server, StopState& stop) {
  int pending = 0;  // a signal that came before the watcher could see the server
  {
    std::lock_guard lock(stop.mu);
    stop.server = &server;
    pending = stop.signal;
  }
  if (pending != 0) {
    spdlog::info("received {}, shutting down", SignalName(pending));
    server.Shutdown(stop.grace);
  }
  server.Wait();
  // The watcher may still hold the pointer while Shutdown returns; stop it before the server
  // goes away.
  std::lock_guard lock(stop.mu);
  stop.server = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  auto configured = ConfigFromCommandLine(argc, argv);
  if (const int* exit_code = std::get_if<int>(&configured)) return *exit_code;
  const ucudnn::server::ServerConfig config = std::get<ucudnn::server::ServerConfig>(configured);
  // gRPC's mutexes are absl's; Debian's absl checks every lock order for deadlock cycles, a debug
  // aid that costs the cached path a few per cent.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ucudnn::LogToStderr("ucudnn-server");
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  StopState stop;
  stop.grace = std::chrono::milliseconds(config.shutdown_grace_ms);
  auto signals = ucudnn::StopSignals::Install([&stop](int signal, int) {
    ucudnn::server::PlannerServer* server = nullptr;
    {
      std::lock_guard lock(stop.mu);
      stop.signal = signal;
      server = stop.server;
    }
    stop.cv.notify_all();
    if (server == nullptr) return;
    spdlog::info("received {}, shutting down (grace {} ms)", SignalName(signal),
                 stop.grace.count());
    server->Shutdown(stop.grace);
  });
  if (!signals.ok()) {
    std::fprintf(stderr, "ucudnn-server: %s\n", signals.status().message().c_str());
    return 1;
  }
  std::unique_ptr<ucudnn::server::PlannerServer> server = StartWhenTheDatabaseIsReady(config, stop);
  if (server == nullptr) return 1;
  ServeUntilStopped(*server, stop);
  signals->reset();
  return 0;
}
