// Everything `ucudnn-worker` does, as library functions; the executable's main only calls
// WorkerMain.
#pragma once

#include <vector>

#include "ucudnn/core/status.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/worker/daemon.h"
#include "ucudnn/worker/options.h"

namespace ucudnn::worker {

// The benchmarking devices the options ask for: the CPU backend for --backend cpu; otherwise one
// cuDNN backend per selected GPU ("gpuN"). --backend auto without a visible GPU is refused
// (kUnavailable, saying to pass --backend cpu), as is a --gpus index that does not exist.
Result<std::vector<BenchmarkDevice>> MakeBenchmarkDevices(const WorkerOptions& options);

BenchmarkOptions MakeBenchmarkOptions(const WorkerOptions& options);
DaemonConfig MakeDaemonConfig(const WorkerOptions& options);

// Parses the command line, runs the daemon (or the offline benchmark) and returns the exit
// status: 0 after a clean stop, 1 when the worker cannot run, 2 for bad flags.
int WorkerMain(int argc, char** argv);

}  // namespace ucudnn::worker
