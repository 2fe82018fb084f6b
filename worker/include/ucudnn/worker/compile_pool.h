// The worker's compile helpers: a PlanCompiler (ucudnn/backends/plan_compiler.h) over helper
// processes (ucudnn-worker --compile-helper), each building the runtime-compiled cuDNN plans it
// is given into the compiled-plan store. cuDNN compiles one such plan at a time per process, and
// a grouped or depthwise problem has dozens (ConvNeXt-T: 51 of its 71 s to know on an H200), while
// processes compile side by side. The benchmark then loads each plan it reaches instead of
// compiling it, or waits for the helper building it.
//
// Helpers start when tasks are queued (up to `processes`), and a helper with nothing to do for
// `idle_exit` exits, so that its CUDA context does not stay on a GPU that jobs train on. A helper
// that dies fails its task (the benchmark then builds that plan itself) and another takes its
// place; when a helper cannot be started at all, every plan is left to the benchmark from then on.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ucudnn/backends/plan_compiler.h"
#include "ucudnn/worker/compile_helper_counts.h"

namespace ucudnn::worker {

struct CompilePoolConfig {
  // The helper's command line (argv[0] a path), e.g. {"/proc/self/exe", "--compile-helper", "0",
  // DIR}: it reads TaskLine()s on stdin and answers each with a line on stdout.
  std::vector<std::string> command;
  int processes = 4;
  std::chrono::milliseconds idle_exit{20000};
  // The longest Await() waits for one task (a helper stuck in cuDNN must not stall the worker).
  std::chrono::milliseconds await_timeout{120000};
};

// How many helpers --compile-processes asks for: `flag` when >= 0, else (auto) half the cores
// less one, at most 6, and at most one per GiB of the memory limit beyond 2 GiB (each helper loads
// CUDA and cuDNN: budgeted at 1 GiB of host memory, not measured), so that a container's limit is
// not what stops them.
int CompileProcesses(int flag, int cores, std::optional<uint64_t> memory_limit_bytes);
// The memory limit of this process's cgroup (v2 memory.max, else v1's), or none.
std::optional<uint64_t> CgroupMemoryLimit();

class CompilePool final : public PlanCompiler {
 public:
  explicit CompilePool(CompilePoolConfig config);
  // Closes the helpers' input, stops them and waits for them.
  ~CompilePool() override;
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  void Queue(const std::vector<Task>& tasks) override;
  bool Await(const Task& task) override;
  void Drop(const std::vector<Task>& tasks) override;

  using Counts = CompileHelperCounts;
  Counts counts() const;
  // The helper processes alive (the idle gate's own processes: IdleGate::SetOwnProcesses).
  std::vector<uint32_t> pids() const;

 private:
  enum class State { kQueued, kRunning };  // done tasks leave entries_
  struct Entry {
    Task task;
    State state;
  };
  struct Slot {
    std::thread thread;
    bool finished = false;  // its last act under mu_: then it only returns
  };
  void EnsureHelpersLocked();  // mu_ held: a helper per queued task, up to `processes`
  void Serve(Slot* slot);      // the thread of one helper process
  void LogWorkDoneLocked();    // mu_ held, every queued plan done: what the helpers did since

  const CompilePoolConfig config_;
  mutable std::mutex mu_;
  std::condition_variable work_;  // a task queued, or stopping
  std::condition_variable done_;  // a task done, or a helper gone
  std::deque<std::string> queue_;
  std::map<std::string, Entry> entries_;  // by Task::Key()
  std::set<std::string> finished_;  // keys of done tasks (bounded): Await() says true for them
  int serving_ = 0;                 // helper threads alive
  bool stopping_ = false;
  bool unavailable_ = false;  // a helper could not be started: the pool builds nothing
  std::vector<pid_t> pids_;   // of the helpers alive
  std::list<Slot> slots_;
  Counts counts_;
  Counts logged_;  // counts_ when the helpers last ran out of work (logged then)
};

}  // namespace ucudnn::worker
