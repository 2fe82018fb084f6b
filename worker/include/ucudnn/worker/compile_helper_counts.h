// What the worker's compile helpers did: CompilePool::counts() (compile_pool.h), shown in the
// worker's metrics (DaemonStats). Apart from compile_pool.h, which needs the backends' headers.
#pragma once
#include <cstdint>

namespace ucudnn::worker {

struct CompileHelperCounts {
  int64_t built = 0;            // tasks a helper answered "ok"
  int64_t failed = 0;           // answered with an error, or lost with their helper
  int64_t dropped = 0;          // queued, then dropped before a helper took them (Drop())
  int64_t helpers_started = 0;  // processes started
  int64_t alive = 0;            // processes running now
  int64_t awaited = 0;          // Await() calls that found their task queued or running
  double awaited_s = 0;         // and the time they waited
};

}  // namespace ucudnn::worker
