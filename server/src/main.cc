// ucudnn-server: the planner server. All logic is in ucudnn_server_lib; this file parses the
// command line, sets up logging and signals, and runs the server until SIGTERM/SIGINT.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include <absl/synchronization/mutex.h>
#include <spdlog/spdlog.h>

#include "ucudnn/core/logging.h"
#include "ucudnn/server/config.h"
#include "ucudnn/server/server.h"

namespace {

constexpr const char* kVersion = "0.1.0";

// SIGTERM/SIGINT reach the signal thread through this pipe. A handler, not only a blocked mask
// and sigwait: libraries start threads before main() (OpenBLAS's pool), and a process-directed
// signal delivered to one of those would otherwise kill the process without a shutdown.
int signal_pipe[2] = {-1, -1};

extern "C" void OnTerminationSignal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = write(signal_pipe[1], &byte, 1);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ucudnn::server;
  if (pipe(signal_pipe) != 0) {
    std::perror("ucudnn-server: pipe");
    return 1;
  }
  struct sigaction action = {};
  action.sa_handler = OnTerminationSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // The threads started from here on keep the signals blocked, so system calls in them are not
  // interrupted; whichever thread still accepts them (main's, or a library's) runs the handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

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
  // gRPC's mutexes are absl's; Debian's absl checks every lock order for deadlock cycles, a debug
  // aid that costs the cached path a few per cent.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ucudnn::LogToStderr("ucudnn-server");
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (auto status = LoadTokenFile(config); !status.ok()) {
    std::fprintf(stderr, "ucudnn-server: %s\n", status.message().c_str());
    return 2;
  }
  if (auto status = ValidateConfig(config); !status.ok()) {
    std::fprintf(stderr, "ucudnn-server: %s\n", status.message().c_str());
    return 2;
  }

  // A database that is not up yet (a fresh deployment, a restart), or whose schema a migration
  // job has not brought up to date yet, is waited for, not fatal.
  const auto first_try = std::chrono::steady_clock::now();
  auto retry_delay = std::chrono::milliseconds(0);
  bool schema_behind = false;
  auto server = PlannerServer::Start(config, &schema_behind);
  while (!server.ok()) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - first_try);
    const auto delay =
        StartRetryDelay(config, server.status(), schema_behind, elapsed, retry_delay);
    if (!delay) break;
    retry_delay = *delay;
    spdlog::warn("{}; retrying in {} ms", server.status().ToString(), retry_delay.count());
    pollfd signal_fd = {signal_pipe[0], POLLIN, 0};
    if (poll(&signal_fd, 1, static_cast<int>(retry_delay.count())) > 0) {
      spdlog::info("signal received while starting; exiting");
      return 1;
    }
    server = PlannerServer::Start(config, &schema_behind);
  }
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }
  std::thread signal_thread([&] {
    unsigned char signal = 0;
    while (read(signal_pipe[0], &signal, 1) < 0 && errno == EINTR) {
    }
    spdlog::info("received {}, shutting down (grace {} ms)",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT", config.shutdown_grace_ms);
    (*server)->Shutdown(std::chrono::milliseconds(config.shutdown_grace_ms));
  });
  (*server)->Wait();
  signal_thread.join();
  return 0;
}
