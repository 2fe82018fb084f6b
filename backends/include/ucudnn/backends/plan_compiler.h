// Runtime-compiled cuDNN execution plans built by other processes into the compiled-plan store
// (cudnn_engines.h), for a process that would otherwise build them one at a time: cuDNN compiles
// one kernel at a time per process (threads did not help), while processes compile side by side
// (on an H200, four depthwise layers' plans compiled in four processes at once took no longer each
// than one after another in one process; docs/results.md, issue 40). The worker's compile helpers
// implement it (compile_pool.h). No cuDNN here: the CPU-only build names it too.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn {

class PlanCompiler {
 public:
  // One plan: a problem (CanonicalKey), a micro-batch size, beta (0 overwrites; 1 accumulates,
  // as backward-filter's later micro-batches do) and an engine configuration (EngineConfigKey),
  // built on the compiler's device.
  struct Task {
    std::string problem_key;
    int64_t batch = 0;
    int beta = 0;
    std::string config_key;
    std::string Key() const {
      return problem_key + "|" + std::to_string(batch) + "|" + std::to_string(beta) + "|" +
             config_key;
    }
  };
  virtual ~PlanCompiler() = default;
  // Queues plans to build, after those already queued, in the order given; known ones are
  // ignored.
  virtual void Queue(const std::vector<Task>& tasks) = 0;
  // Returns once `task` is built (and in the store, unless its build failed), moving it to the
  // front of the queue if it has not started: true. At once with false when the task was never
  // queued (the caller then builds it itself, without looking in the store again).
  virtual bool Await(const Task& task) = 0;
  // Forgets queued tasks no one will await (the benchmark left their configuration out at that
  // size): those not started are not built; one started finishes. Await() of a forgotten task
  // returns false at once, as for one never queued.
  virtual void Drop(const std::vector<Task>& tasks) = 0;
};

// A task as one line of the compile helpers' protocol (no newline): the problem key, the batch,
// beta and the configuration key, tab-separated (neither key holds a tab). The helper answers each
// line with one line: "ok", or "error: " and why.
std::string TaskLine(const PlanCompiler::Task& task);
Result<PlanCompiler::Task> ParseTaskLine(std::string_view line);
// One line of the protocol from `in`, without its newline; false at the end of the stream.
bool ReadLine(std::FILE* in, std::string& line);

// The compile helper's side (ucudnn-worker --compile-helper GPU DIRECTORY): on GPU `gpu`, with the
// compiled-plan store in `directory`, builds each task read from `in` into the store (answering
// on `out`) until `in` ends. Exit status 0 then, 1 when it cannot start (no cuDNN in this build,
// no such GPU).
int RunPlanCompileHelper(int gpu, const std::string& directory, std::FILE* in, std::FILE* out);

}  // namespace ucudnn
