#include "ucudnn/worker/compile_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ucudnn/core/text.h"

extern char** environ;

namespace ucudnn::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Done tasks remembered for Await(): a plan finished just before the benchmark asked is loaded,
// not built again. Forgotten wholesale past this many (a worker runs for days).
constexpr size_t kMaxFinished = 4096;

// A helper process, its input and output as streams.
struct Helper {
  pid_t pid = -1;
  std::FILE* to = nullptr;
  std::FILE* from = nullptr;
};

Result<Helper> Spawn(const std::vector<std::string>& command) {
  if (command.empty()) return InvalidArgument("compile helper: no command");
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  // Close-on-exec: another thread's helper must not inherit this one's pipes.
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1]}) {
      if (fd >= 0) close(fd);
    }
    return Unavailable("compile helper: pipe: " + why);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  Helper helper;
  const int spawned = posix_spawn(&helper.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (spawned != 0) {
    close(in[1]);
    close(out[0]);
    return Unavailable("compile helper: cannot start " + command[0] + ": " +
                       std::strerror(spawned));
  }
  helper.to = fdopen(in[1], "w");
  helper.from = fdopen(out[0], "r");
  if (helper.to == nullptr || helper.from == nullptr) {
    // Unreachable in practice (fdopen of a fresh pipe); the helper exits at the closed input.
    if (helper.to == nullptr) close(in[1]);
    if (helper.from == nullptr) close(out[0]);
    return Unavailable("compile helper: fdopen failed");
  }
  return helper;
}

// One answer line (without its newline); false when the helper is gone.
bool ReadLine(std::FILE* from, std::string& line) {
  line.clear();
  for (int c; (c = std::fgetc(from)) != EOF;) {
    if (c == '\n') return true;
    line.push_back(static_cast<char>(c));
  }
  return false;
}

// Closes the helper's input (it exits at its end) and output, and reaps it.
void Finish(Helper& helper) {
  if (helper.to != nullptr) std::fclose(helper.to);
  if (helper.from != nullptr) std::fclose(helper.from);
  int status = 0;
  while (waitpid(helper.pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

int CompileProcesses(int flag, int cores, std::optional<uint64_t> memory_limit_bytes) {
  if (flag >= 0) return flag;
  int processes = std::clamp(cores / 2 - 1, 0, 6);
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  if (memory_limit_bytes.has_value()) {
    const uint64_t spare = *memory_limit_bytes > 2 * kGiB ? *memory_limit_bytes - 2 * kGiB : 0;
    processes = std::min<int>(processes, static_cast<int>(std::min<uint64_t>(spare / kGiB, 64)));
  }
  return processes;
}

std::optional<uint64_t> CgroupMemoryLimit() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text)) continue;
    if (text == "max") return std::nullopt;
    Result<uint64_t> bytes = ParseInteger<uint64_t>("memory limit", text);
    // cgroup v1 says "no limit" with a number near 2^63.
    if (bytes.ok() && *bytes < (uint64_t{1} << 60)) return *bytes;
    return std::nullopt;
  }
  return std::nullopt;
}

CompilePool::CompilePool(CompilePoolConfig config) : config_(std::move(config)) {
  // A helper that dies leaves a closed pipe: writing to it must fail, not kill the worker.
  std::signal(SIGPIPE, SIG_IGN);
}

CompilePool::~CompilePool() {
  std::list<Slot> slots;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // Stopped, not drained: a helper would otherwise finish the compilation in hand first.
    for (pid_t pid : pids_) kill(pid, SIGTERM);
    work_.notify_all();
    done_.notify_all();
    slots.splice(slots.end(), slots_);
  }
  for (Slot& slot : slots) slot.thread.join();
}

void CompilePool::Queue(const std::vector<Task>& tasks) {
  std::lock_guard lock(mu_);
  if (unavailable_ || stopping_) return;
  for (const Task& task : tasks) {
    std::string key = task.Key();
    if (states_.count(key) > 0) continue;
    tasks_.emplace(key, task);
    states_.emplace(key, State::kQueued);
    queue_.push_back(std::move(key));
  }
  EnsureHelpersLocked();
  work_.notify_all();
}

bool CompilePool::Await(const Task& task) {
  const std::string key = task.Key();
  std::unique_lock lock(mu_);
  auto it = states_.find(key);
  if (it == states_.end()) return finished_.count(key) > 0;
  if (it->second == State::kQueued) {
    // The benchmark needs it now: ahead of the plans of later sizes.
    queue_.erase(std::find(queue_.begin(), queue_.end(), key));
    queue_.push_front(key);
    EnsureHelpersLocked();
    work_.notify_all();
  }
  const Clock::time_point start = Clock::now();
  ++counts_.awaited;
  done_.wait_for(lock, config_.await_timeout, [&] {
    return stopping_ || unavailable_ || states_.count(key) == 0 || serving_ == 0;
  });
  counts_.awaited_s += std::chrono::duration<double>(Clock::now() - start).count();
  return true;
}

CompilePool::Counts CompilePool::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

std::vector<uint32_t> CompilePool::pids() const {
  std::lock_guard lock(mu_);
  return std::vector<uint32_t>(pids_.begin(), pids_.end());
}

void CompilePool::EnsureHelpersLocked() {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (it->finished) {
      it->thread.join();  // it has left mu_ for good
      it = slots_.erase(it);
    } else {
      ++it;
    }
  }
  const auto wanted = static_cast<int>(
      std::min(static_cast<size_t>(std::max(config_.processes, 0)), queue_.size()));
  while (!unavailable_ && !stopping_ && serving_ < wanted) {
    ++serving_;
    Slot& slot = slots_.emplace_back();
    slot.thread = std::thread([this, &slot] { Serve(&slot); });
  }
}

void CompilePool::Serve(Slot* slot) {
  Result<Helper> started = Spawn(config_.command);
  std::unique_lock lock(mu_);
  if (!started.ok()) {
    spdlog::warn("{}; runtime-compiled plans are built by the worker itself",
                 started.status().message());
    unavailable_ = true;
    --serving_;
    done_.notify_all();
    slot->finished = true;
    return;
  }
  Helper helper = *started;
  pids_.push_back(helper.pid);
  ++counts_.helpers_started;
  while (true) {
    const bool has_work =
        work_.wait_for(lock, config_.idle_exit, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_ || !has_work) break;
    const std::string key = queue_.front();
    queue_.pop_front();
    states_[key] = State::kRunning;
    const std::string line = TaskLine(tasks_.at(key)) + "\n";
    lock.unlock();
    std::string answer;
    const bool alive = std::fputs(line.c_str(), helper.to) != EOF && std::fflush(helper.to) == 0 &&
                       ReadLine(helper.from, answer);
    lock.lock();
    tasks_.erase(key);
    states_.erase(key);
    if (finished_.size() >= kMaxFinished) finished_.clear();
    finished_.insert(key);
    if (answer == "ok") {
      ++counts_.built;
    } else {
      ++counts_.failed;
      if (alive) spdlog::debug("compile helper {}: {}: {}", helper.pid, key, answer);
    }
    done_.notify_all();
    if (states_.empty()) {
      // All queued plans done: what the helpers did for this batch of work.
      spdlog::info(
          "compile helpers: {} plans built, {} failed; the benchmark waited {} times, {:.1f} s",
          counts_.built - logged_.built, counts_.failed - logged_.failed,
          counts_.awaited - logged_.awaited, counts_.awaited_s - logged_.awaited_s);
      logged_ = counts_;
    }
    if (!alive) {
      if (!stopping_)
        spdlog::warn("compile helper {} stopped; another takes its place", helper.pid);
      break;
    }
  }
  pids_.erase(std::find(pids_.begin(), pids_.end(), helper.pid));
  lock.unlock();
  Finish(helper);
  lock.lock();
  --serving_;
  done_.notify_all();
  if (!stopping_ && !queue_.empty()) EnsureHelpersLocked();
  slot->finished = true;
}

}  // namespace ucudnn::worker
