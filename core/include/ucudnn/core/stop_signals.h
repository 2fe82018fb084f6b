// SIGTERM/SIGINT to a callback, for a daemon's orderly stop (library ucudnn_stop_signals). The
// handler only counts the signal and wakes a watcher thread through a pipe; the watcher calls the
// callback (which may lock, log, notify). A handler, not sigwait: threads started before main
// (e.g. OpenBLAS's pool) do not block the signals, so only a process-wide handler catches a
// signal whichever thread receives it.
#pragma once

#include <functional>
#include <memory>

#include "ucudnn/core/status.h"

namespace ucudnn {

class StopSignals {
 public:
  // `on_signal(signal_number, count)` runs on the watcher thread for every SIGTERM or SIGINT;
  // count is 1 for the first, 2 for the second, ... At most one instance at a time
  // (kFailedPrecondition otherwise). The previous dispositions are restored on destruction.
  static Result<std::unique_ptr<StopSignals>> Install(std::function<void(int, int)> on_signal);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  class Impl;

 private:
  explicit StopSignals(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ucudnn
