// Session: contribution. At a quiet point, a job whose device no live worker serves benchmarks the
// problems the server lacks timings for on a backend of its own and submits them, so that its
// kernels get plans (and so does every later job on such a device).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "config_internal.h"
#include "log.h"
#include "session.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::client {
namespace {

// Who measured contributed timings (TimingSubmission.measured_by, at most 128 bytes).
std::string MeasuredBy() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string who = std::string("ucudnn-client ") + (host[0] != '\0' ? host : "unknown-host") +
                    " pid " + std::to_string(::getpid());
  if (who.size() > 128) who.resize(128);
  return who;
}

// Whether a measured timing says something about this job rather than about the device: a
// failure (an allocation the training job's memory left no room for, say) or a configuration
// over the engine's workspace cap. Such timings are not submitted, so that a job cannot mark
// configurations unusable for the whole cluster; a worker may measure them later.
bool JobLocal(const Timing& t, const BenchmarkOptions& options) {
  if (t.status == TimingStatus::kFailed) return true;
  return t.status == TimingStatus::kUnsupported && t.workspace_bytes > options.workspace_cap_bytes;
}

// `call()`, with what it throws turned into an error naming `what`: the training job must not see
// an exception from contribution.
template <typename Call>
auto Guarded(const char* what, Call call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    return Internal(std::string(what) + " threw: " + e.what());
  } catch (...) {
    return Internal(std::string(what) + " threw");
  }
}

}  // namespace

Result<int> Session::Contribute(Clock::time_point deadline) {
  if (!contribution_enabled_) return 0;
  std::lock_guard contributing(contribute_mutex_);
  const std::vector<MissingProblem> missing = MissingProblems();
  if (missing.empty()) return 0;

  // Workers first: when one serves this device, the server's queue reaches it.
  UCUDNN_ASSIGN_OR_RETURN(const int live, LiveWorkersOfDevice());
  if (live > 0) {
    client::Log().info(
        "contribution: {} live worker(s) serve this device; leaving the {} missing "
        "problem(s) to them",
        live, missing.size());
    return 0;
  }
  UCUDNN_ASSIGN_OR_RETURN(const std::unique_ptr<ConvBackend> bench, OpenContributionBackend());

  const std::string measured_by = MeasuredBy();
  int submitted = 0;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (Clock::now() >= deadline) {
      client::Log().info("contribution: out of time; {} problem(s) left for the next quiet point",
                         missing.size() - i);
      break;
    }
    if (ContributeProblem(*bench, missing[i], measured_by)) ++submitted;
  }
  return submitted;
}

std::vector<Session::MissingProblem> Session::MissingProblems() const {
  // The server asks a request's kernels of a problem for the sizes up to their largest
  // mini-batch, and a per-kernel request may hold any one of them; the policy's sizes of two
  // mini-batches need not nest (those of 3 are not among those of 6): every kernel's sizes.
  std::vector<MissingProblem> missing;
  std::lock_guard lock(mutex_);
  for (const auto& kernel : table_.entries()) {
    if (kernel->state != KernelReport::State::kMissing) continue;
    auto m = std::find_if(missing.begin(), missing.end(),
                          [&](const MissingProblem& x) { return x.problem == kernel->problem; });
    if (m == missing.end()) m = missing.insert(missing.end(), MissingProblem{kernel->problem, {}});
    for (int64_t size : MicroBatchSizes(policy_, kernel->batch)) m->sizes.insert(size);
  }
  // Once per problem and size: what this session submitted, the server has.
  for (MissingProblem& m : missing) {
    for (const auto& [problem, size] : contributed_) {
      if (problem == m.problem) m.sizes.erase(size);
    }
  }
  std::erase_if(missing, [](const MissingProblem& m) { return m.sizes.empty(); });
  return missing;
}

Result<int> Session::LiveWorkersOfDevice() {
  Result<int> live =
      Guarded("ListDevices", [&]() -> Result<int> { return source_->LiveWorkers(device_); });
  if (!live.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn(
        "contribution: cannot tell whether a worker serves this device ({}); "
        "not benchmarking",
        live.status().ToString());
  }
  return live;
}

Result<std::unique_ptr<ConvBackend>> Session::OpenContributionBackend() {
  Result<std::unique_ptr<ConvBackend>> bench =
      Guarded("contribution backend",
              [&]() -> Result<std::unique_ptr<ConvBackend>> { return contribution_backend_(); });
  if (bench.ok() && !((*bench)->fingerprint() == device_)) {
    bench = Internal("its device " + (*bench)->fingerprint().Key() + " is not the job's " +
                     device_.Key());
  }
  if (!bench.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn("contribution: no backend to measure on: {}", bench.status().ToString());
  }
  return bench;
}

bool Session::ContributeProblem(ConvBackend& bench, const MissingProblem& missing,
                                const std::string& measured_by) {
  const std::string key = CanonicalKey(missing.problem);
  const std::vector<int64_t> sizes(missing.sizes.begin(), missing.sizes.end());
  client::Log().info("contribution: benchmarking {} at micro-batches {} ({})", key,
                     fmt::join(sizes, ","), ToString(policy_));
  Result<TimingTable> table = Guarded("benchmark", [&]() -> Result<TimingTable> {
    return BenchmarkMicroBatches(bench, missing.problem, sizes, benchmark_options_);
  });
  if (!table.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn("contribution: benchmarking {} failed: {}", key, table.status().ToString());
    return false;
  }
  std::vector<Timing> timings;
  size_t dropped = 0;
  for (Timing& t : table->entries) {
    if (JobLocal(t, benchmark_options_)) {
      ++dropped;
    } else {
      timings.push_back(std::move(t));
    }
  }
  if (timings.empty()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    client::Log().warn("contribution: nothing to submit for {} ({} configurations failed here)",
                       key, dropped);
    return false;
  }
  Result<int> stored = SubmitTimings(missing.problem, timings, measured_by);
  if (!stored.ok()) {
    contribution_failures_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  contributed_problems_.fetch_add(1, std::memory_order_relaxed);
  contributed_timings_.fetch_add(static_cast<uint64_t>(std::max(0, *stored)),
                                 std::memory_order_relaxed);
  client::Log().info("contribution: {} timings of {} submitted ({} kept back as job-local)",
                     *stored, key, dropped);
  std::lock_guard lock(mutex_);
  for (int64_t size : sizes) contributed_.emplace_back(missing.problem, size);
  AskAgainAfterContribution(missing.problem);
  return true;
}

Result<int> Session::SubmitTimings(const ConvProblem& problem, const std::vector<Timing>& timings,
                                   const std::string& measured_by) {
  Result<int> stored = Guarded("SubmitTimings", [&]() -> Result<int> {
    return source_->SubmitTimings(device_, problem, timings, measured_by);
  });
  if (!stored.ok()) {
    client::Log().warn("submitting the timings of {} failed: {}", CanonicalKey(problem),
                       stored.status().ToString());
  }
  return stored;
}

Status Session::SubmitFrameworkTimings(const std::vector<FrameworkTiming>& timings) {
  if (source_ == nullptr) return Unavailable("no server (UCUDNN_SERVER) to submit timings to");
  if (framework_.empty()) {
    return Unavailable("no framework identity (UCUDNN_FRAMEWORK) to submit timings as");
  }
  if (config_.token.empty()) return Unavailable("submitting timings needs UCUDNN_TOKEN");
  // One submission per problem; a kernel given twice keeps its last time.
  std::vector<std::pair<ConvProblem, std::vector<Timing>>> by_problem;
  for (size_t i = 0; i < timings.size(); ++i) {
    const FrameworkTiming& f = timings[i];
    const std::string where = "timings[" + std::to_string(i) + "]";
    UCUDNN_RETURN_IF_ERROR(ValidateBatch(f.batch).WithContext(where));
    if (!std::isfinite(f.time_ms) || f.time_ms <= 0) {
      return InvalidArgument(where + ".time_ms: must be finite and positive");
    }
    if (!std::isfinite(f.spread_ms) || f.spread_ms < 0) {
      return InvalidArgument(where + ".spread_ms: must be finite and non-negative");
    }
    Timing t;
    t.micro_batch = f.batch;
    t.algo = kFrameworkAlgo;
    t.engine_config = framework_;
    t.time_ms = f.time_ms;
    t.spread_ms = f.spread_ms;
    t.workspace_bytes = f.workspace_bytes;
    auto group = std::find_if(by_problem.begin(), by_problem.end(),
                              [&](const auto& g) { return g.first == f.problem; });
    if (group == by_problem.end()) group = by_problem.insert(by_problem.end(), {f.problem, {}});
    std::erase_if(group->second, [&](const Timing& x) { return x.micro_batch == t.micro_batch; });
    group->second.push_back(std::move(t));
  }
  const std::string measured_by = MeasuredBy();
  for (const auto& [problem, problem_timings] : by_problem) {
    Result<int> stored = SubmitTimings(problem, problem_timings, measured_by);
    if (!stored.ok()) {
      return Unavailable("the server refused the framework timings of " + CanonicalKey(problem) +
                         ": " + stored.status().ToString());
    }
    std::lock_guard lock(mutex_);
    AskAgainAfterContribution(problem, /*planned_too=*/true);
  }
  return Status::Ok();
}

void Session::AskAgainAfterContribution(const ConvProblem& problem, bool planned_too) {
  const Clock::time_point now = Clock::now();
  ++contribution_epoch_;
  bool any = false;
  for (const auto& kernel : table_.entries()) {
    if (!(kernel->problem == problem)) continue;
    // Also kernels in a request in flight now: its answer was made from the timings before these
    // and must not mark them missing (see ContributedSince).
    kernel->contributed_epoch = contribution_epoch_;
    if (kernel->state != KernelReport::State::kMissing && !planned_too) continue;
    any = true;
    kernel->state = KernelReport::State::kWaiting;
    kernel->reason = "timings submitted; asking again";
    bool queued = false;
    for (Pending& p : pending_) {
      if (p.kernel == kernel.get()) {
        p.due = now;
        p.attempts = 0;
        queued = true;
      }
    }
    // A kernel with an answer is asked again too (per-kernel mode; the total modes ask for the
    // whole network below).
    if (!queued && mode_ == WorkspaceMode::kPerKernel && source_ != nullptr) {
      pending_.push_back(Pending{kernel.get(), 0, now});
    }
  }
  if (any && mode_ != WorkspaceMode::kPerKernel) {
    // The same network again, at once: no need to wait for the collection to settle; and not
    // from the local cache, whose plan predates these timings.
    AskNetworkAgainNow();
    network_skip_cache_ = planned_too;
  }
  work_cv_.notify_one();
}

}  // namespace ucudnn::client
