#include "ucudnn/worker/compile_pool.h"

#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// A helper process and our end of the socket that is its stdin and stdout. Written with
// send(MSG_NOSIGNAL): a helper that died fails the write instead of raising SIGPIPE in the worker.
struct Helper {
  pid_t pid = -1;
  std::FILE* from = nullptr;  // our end, read line by line
};

Result<Helper> Spawn(const std::vector<std::string>& command) {
  if (command.empty()) return InvalidArgument("compile helper: no command");
  int ends[2] = {-1, -1};
  // Close-on-exec: another thread's helper must not inherit this one's socket.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    return Unavailable(std::string("compile helper: socketpair: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  Helper helper;
  const int spawned = posix_spawn(&helper.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(ends[1]);
  if (spawned != 0) {
    close(ends[0]);
    return Unavailable("compile helper: cannot start " + command[0] + ": " +
                       std::strerror(spawned));
  }
  helper.from = fdopen(ends[0], "r");
  if (helper.from == nullptr) {
    close(ends[0]);  // the helper exits at the end of its input
    return Unavailable("compile helper: fdopen failed");
  }
  return helper;
}

bool SendLine(const Helper& helper, const std::string& line) {
  const int fd = fileno(helper.from);
  for (size_t sent = 0; sent < line.size();) {
    const ssize_t n = send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Ends the helper's input (it exits at its end), closes our end and reaps it.
void Finish(Helper& helper) {
  shutdown(fileno(helper.from), SHUT_WR);
  std::fclose(helper.from);
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

CompilePool::CompilePool(CompilePoolConfig config) : config_(std::move(config)) {}

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
    if (!entries_.try_emplace(key, Entry{task, State::kQueued}).second) continue;
    queue_.push_back(std::move(key));
  }
  EnsureHelpersLocked();
  work_.notify_all();
}

void CompilePool::Drop(const std::vector<Task>& tasks) {
  std::lock_guard lock(mu_);
  for (const Task& task : tasks) {
    const std::string key = task.Key();
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.state != State::kQueued) continue;
    queue_.erase(std::find(queue_.begin(), queue_.end(), key));
    entries_.erase(it);
    ++counts_.dropped;
  }
  if (entries_.empty() && counts_.dropped > logged_.dropped) LogWorkDoneLocked();
}

void CompilePool::LogWorkDoneLocked() {
  spdlog::info(
      "compile helpers: {} plans built, {} failed, {} dropped (left out by the benchmark); the "
      "benchmark waited {} times, {:.1f} s",
      counts_.built - logged_.built, counts_.failed - logged_.failed,
      counts_.dropped - logged_.dropped, counts_.awaited - logged_.awaited,
      counts_.awaited_s - logged_.awaited_s);
  logged_ = counts_;
}

bool CompilePool::Await(const Task& task) {
  const std::string key = task.Key();
  std::unique_lock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return finished_.count(key) > 0;
  if (it->second.state == State::kQueued) {
    // The benchmark needs it now: ahead of the plans of later sizes.
    queue_.erase(std::find(queue_.begin(), queue_.end(), key));
    queue_.push_front(key);
    EnsureHelpersLocked();
    work_.notify_all();
  }
  const Clock::time_point start = Clock::now();
  ++counts_.awaited;
  done_.wait_for(lock, config_.await_timeout, [&] {
    return stopping_ || unavailable_ || entries_.count(key) == 0 || serving_ == 0;
  });
  counts_.awaited_s += std::chrono::duration<double>(Clock::now() - start).count();
  return true;
}

CompilePool::Counts CompilePool::counts() const {
  std::lock_guard lock(mu_);
  Counts counts = counts_;
  counts.alive = static_cast<int64_t>(pids_.size());
  return counts;
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
    Entry& entry = entries_.at(key);
    entry.state = State::kRunning;
    const std::string line = TaskLine(entry.task) + "\n";
    lock.unlock();
    std::string answer;
    const bool alive = SendLine(helper, line) && ReadLine(helper.from, answer);
    lock.lock();
    entries_.erase(key);
    if (finished_.size() >= kMaxFinished) finished_.clear();
    finished_.insert(key);
    if (answer == "ok") {
      ++counts_.built;
    } else {
      ++counts_.failed;
      if (alive) spdlog::debug("compile helper {}: {}: {}", helper.pid, key, answer);
    }
    done_.notify_all();
    if (entries_.empty()) LogWorkDoneLocked();
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
