#include "ucudnn/core/stop_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

namespace ucudnn {
namespace {

std::atomic<int> g_write_fd{-1};
std::atomic<bool> g_installed{false};

extern "C" void OnStopSignal(int signal_number) {
  const int saved_errno = errno;
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    // Async-signal-safe; a full pipe just drops the byte (the first one already stops us).
    [[maybe_unused]] ssize_t n = write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

class StopSignals::Impl {
 public:
  ~Impl() {
    if (pipe_[0] < 0) return;  // Install failed before anything was set up
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    g_write_fd = -1;
    const unsigned char quit = 0;
    [[maybe_unused]] ssize_t n = write(pipe_[1], &quit, 1);
    if (watcher_.joinable()) watcher_.join();
    close(pipe_[0]);
    close(pipe_[1]);
    g_installed = false;
  }

  int pipe_[2] = {-1, -1};
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
  std::thread watcher_;
};

Result<std::unique_ptr<StopSignals>> StopSignals::Install(std::function<void(int, int)> on_signal) {
  if (g_installed.exchange(true)) return FailedPrecondition("StopSignals: already installed");
  auto impl = std::make_unique<Impl>();
  if (pipe2(impl->pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    impl->pipe_[0] = impl->pipe_[1] = -1;
    g_installed = false;
    return Internal(std::string("StopSignals: pipe2: ") + std::strerror(errno));
  }
  // The reading end blocks in poll(); only the writing end must not block the handler.
  fcntl(impl->pipe_[0], F_SETFL, 0);
  g_write_fd = impl->pipe_[1];
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &impl->old_term_);
  sigaction(SIGINT, &action, &impl->old_int_);
  const int read_fd = impl->pipe_[0];
  impl->watcher_ = std::thread([read_fd, on_signal = std::move(on_signal)] {
    int count = 0;
    while (true) {
      unsigned char byte = 0;
      const ssize_t n = read(read_fd, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 0) return;  // closed, or the destructor's quit byte
      on_signal(static_cast<int>(byte), ++count);
    }
  });
  return std::unique_ptr<StopSignals>(new StopSignals(std::move(impl)));
}

StopSignals::StopSignals(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StopSignals::~StopSignals() = default;

}  // namespace ucudnn
