// What a running process holds, from /proc: shared by the tests and benchmarks that bound the
// server's threads and memory (library `ucudnn::test_support`).
#pragma once

#include <sys/types.h>

namespace ucudnn::test_support {

struct ProcessUsage {
  int threads = -1;  // -1: the process could not be read (it is gone)
  double rss_mb = 0;
  double peak_rss_mb = 0;  // VmHWM: the most it ever held
  double cpu_seconds = 0;  // user + system
};

// Threads, resident memory and CPU time of `pid`, from /proc/PID/status and /proc/PID/stat.
ProcessUsage ReadProcessUsage(pid_t pid);

}  // namespace ucudnn::test_support
