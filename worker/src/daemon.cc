#include "ucudnn/worker/daemon.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "ucudnn/core/backoff.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/units.h"

namespace ucudnn::worker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Errors that a later retry of the same call may not see: the database away, overloaded, slow.
bool IsTransient(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kResourceExhausted;
}

// +-20% on every retry delay, so workers that lost the database together do not reconnect in
// lock step.
constexpr BackoffJitter kRetryJitter{0.8, 1.2};
// Idle workers poll the queue within 10% of --poll, so that they do not query in step.
constexpr BackoffJitter kPollJitter{0.9, 1.1};

std::string Describe(const ConvProblem& p) {
  return std::string(ToString(p.op)) + " c=" + std::to_string(p.c) + " " + std::to_string(p.h) +
         "x" + std::to_string(p.w) + " k=" + std::to_string(p.k) + " " + std::to_string(p.r) + "x" +
         std::to_string(p.s);
}

}  // namespace

bool CompletionCommitted(const store::Job& claimed, const store::Job& now,
                         const std::vector<store::TimingRecord>& records,
                         const std::vector<Timing>& timings, const std::string& worker_id) {
  if (now.id != claimed.id) return false;
  if (now.state == store::JobState::kRunning && now.worker_id == worker_id) return false;
  if (now.state == store::JobState::kDone && now.worker_id == worker_id) return true;
  // Every row of our table, written by us since our claim (claimed.updated_at is the claim's
  // time and measured_at the completion's, both the database's clock, in a fixed-width UTC form
  // that sorts as text). Our worker-limit rows are left out: the store keeps another worker's
  // measurement over them. A row replaced since by another worker's measurement makes this
  // false: then the job is counted discarded though its timings were written, which costs a log
  // line, never a timing.
  if (claimed.updated_at.empty()) return false;
  using Key = std::tuple<int64_t, int, std::string>;
  std::map<Key, const store::TimingRecord*> by_key;
  for (const store::TimingRecord& r : records) {
    by_key[{r.timing.micro_batch, r.timing.algo, r.timing.engine_config}] = &r;
  }
  int checked = 0;
  for (const Timing& t : timings) {
    if (IsWorkerLimit(t)) continue;
    ++checked;
    auto it = by_key.find({t.micro_batch, t.algo, t.engine_config});
    if (it == by_key.end()) return false;
    const store::TimingRecord& r = *it->second;
    if (r.measured_by != worker_id || r.measured_at < claimed.updated_at) return false;
  }
  return checked > 0;
}

class LeaseKeeper;

// Logs a database outage once when it starts and once when it ends, instead of once per call.
class DatabaseHealth {
 public:
  void Failed(const std::string& who, const Status& status) {
    std::lock_guard lock(mu_);
    if (!down_) {
      down_ = true;
      since_ = Clock::now();
      spdlog::warn("[{}] database unavailable, retrying with back-off: {}", who, status.ToString());
    } else {
      spdlog::debug("[{}] database still unavailable: {}", who, status.ToString());
    }
  }
  void Succeeded() {
    std::lock_guard lock(mu_);
    if (down_) {
      down_ = false;
      spdlog::info("database reachable again after {:.1f} s", SecondsSince(since_));
    }
  }

 private:
  std::mutex mu_;
  bool down_ = false;
  Clock::time_point since_;
};

struct Slot {
  BenchmarkDevice device;
  std::string worker_id;
  DeviceFingerprint fingerprint;
  uint64_t device_hash = 0;
  std::atomic<bool> registered{false};
  // Set once, by the slot's own thread, when its device was lost; the thread then ends and the
  // heartbeat skips the slot. lost_status is read after that thread was joined.
  std::atomic<bool> lost{false};
  Status lost_status;
  // The job in hand and its progress, read by stats() from other threads.
  std::atomic<int64_t> job_id{0};
  std::atomic<int64_t> configurations_done{0};
  std::atomic<int64_t> configurations_total{0};
};

class Daemon::Impl {
 public:
  Impl(store::Store& store, std::vector<BenchmarkDevice> devices, DaemonConfig config)
      : store_(store), config_(std::move(config)) {
    for (auto& device : devices) {
      auto slot = std::make_unique<Slot>();
      slot->worker_id = config_.id_prefix + ":" + device.slot;
      if (device.backend) {
        slot->fingerprint = device.backend->fingerprint();
        slot->device_hash = slot->fingerprint.Hash();
      }
      slot->device = std::move(device);
      slots_.push_back(std::move(slot));
    }
  }

  Status Run();
  void RequestStop(bool immediate);
  bool stop_requested() const {
    std::lock_guard lock(mu_);
    return stop_requested_;
  }
  bool DrainExpired() const {
    std::lock_guard lock(mu_);
    return stop_requested_ && Clock::now() >= drain_deadline_;
  }
  std::vector<std::string> worker_ids() const {
    std::vector<std::string> ids;
    for (const auto& s : slots_) ids.push_back(s->worker_id);
    return ids;
  }
  std::vector<uint64_t> device_hashes() const {
    std::vector<uint64_t> hashes;
    for (const auto& s : slots_) hashes.push_back(s->device_hash);
    return hashes;
  }
  DaemonStats stats() const {
    DaemonStats stats;
    stats.claimed = claimed_.load();
    stats.completed = completed_.load();
    stats.failed = failed_.load();
    stats.released = released_.load();
    stats.abandoned = abandoned_.load();
    stats.devices_lost = devices_lost_.load();
    stats.idle_gate_pauses = claims_put_off_.load();
    for (const auto& slot : slots_) {
      if (slot->device.gate != nullptr) stats.idle_gate_pauses += slot->device.gate->pauses();
    }
    stats.configurations_measured = configurations_measured_.load();
    stats.last_heartbeat_unix_seconds = last_heartbeat_unix_seconds_.load();
    stats.schema_too_new = store_.schema_too_new();
    for (const auto& slot : slots_) {
      stats.slots.push_back({slot->worker_id, slot->job_id.load(), slot->configurations_done.load(),
                             slot->configurations_total.load()});
    }
    return stats;
  }

 private:
  friend class LeaseKeeper;

  // The back-off of a loop that retries the database.
  Backoff RetryBackoff() const {
    return Backoff(config_.retry_initial, config_.retry_max, kRetryJitter);
  }

  // Sleeps `duration` or until a stop request (then true).
  bool SleepOrStop(milliseconds duration) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, duration, [&] { return stop_requested_; });
  }
  // Notifications of queued jobs for this worker's devices so far (JobsListenLoop).
  uint64_t JobsNotified() const {
    std::lock_guard lock(mu_);
    return jobs_notified_;
  }
  // Sleeps `duration`, until a job is notified after `notified` (JobsNotified()), or until a
  // stop request (then true).
  bool SleepUntilJobOrStop(milliseconds duration, uint64_t notified) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, duration, [&] { return stop_requested_ || jobs_notified_ != notified; });
    return stop_requested_;
  }
  // Sleeps `duration`, cut short when the drain deadline passes meanwhile.
  void SleepWithinDrain(milliseconds duration) {
    std::unique_lock lock(mu_);
    Clock::time_point until = Clock::now() + duration;
    while (Clock::now() < until) {
      if (stop_requested_ && Clock::now() >= drain_deadline_) return;
      Clock::time_point wake = stop_requested_ ? std::min(until, drain_deadline_) : until;
      const int generation = stop_generation_;
      cv_.wait_until(lock, wake, [&] { return stop_generation_ != generation; });
    }
  }

  Status Register(Slot& slot);
  void SlotLoop(Slot& slot);
  // Returns false when the benchmark itself failed (the job was recorded failed).
  bool RunJob(Slot& slot, const store::Job& job);
  void HeartbeatLoop();
  // LISTENs on config_.jobs_listen_url's kJobsChannel until the claim loops end, and wakes the
  // slots whose device a notification names.
  void JobsListenLoop();

  enum class Outcome { kDone, kLost, kGaveUp };
  // Stores the timings and completes the job, retrying while the database is away.
  Outcome Complete(Slot& slot, const store::Job& job, const TimingTable& table, LeaseKeeper& keeper,
                   double elapsed_s);
  Outcome Fail(Slot& slot, const store::Job& job, const Status& error, LeaseKeeper& keeper);
  void Release(Slot& slot, const store::Job& job);
  // What the device's nearby problems say not to time (PriorLosers); empty when none or off.
  std::map<std::string, std::string> LoadPrior(const Slot& slot, const store::Job& job);
  // What the store holds of the job's problem on the slot's device (a search for a limit
  // starts from it); empty when it cannot be read (the search then times from scratch).
  TimingTable LoadKnown(const Slot& slot, const store::Job& job);
  // A benchmark given up for a busy GPU: its finished entries written (retrying a short while).
  void StorePartial(Slot& slot, const store::Job& job, const std::vector<Timing>& finished);
  // The slot's device is gone: its thread stops after releasing its job; the last one stops the
  // daemon.
  void MarkLost(Slot& slot, const Status& status);
  // After kFailedPrecondition: whether our completion of `job` with `table` committed (a reply
  // that got lost), the job is still held by us, or it is someone else's. Retries the reads while
  // the database is away.
  enum class Holder { kDoneByUs, kHeldByUs, kNotOurs, kUnknown };
  Holder CheckHolder(const Slot& slot, const store::Job& job, const TimingTable& table);

  store::Store& store_;
  DaemonConfig config_;
  std::vector<std::unique_ptr<Slot>> slots_;
  DatabaseHealth health_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  int stop_generation_ = 0;  // bumped on every RequestStop, so waiters recompute deadlines
  Clock::time_point drain_deadline_;
  bool loops_finished_ = false;
  uint64_t jobs_notified_ = 0;  // guarded by mu_
  bool ran_ = false;

  std::atomic<int64_t> claimed_{0}, completed_{0}, failed_{0}, released_{0}, abandoned_{0},
      devices_lost_{0}, configurations_measured_{0}, claims_put_off_{0};
  std::atomic<double> last_heartbeat_unix_seconds_{0};

  void RecordHeartbeat() {
    last_heartbeat_unix_seconds_ =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
};

// Renews a job's lease in the background while the benchmark runs, and cancels the benchmark
// when the lease is lost or the drain time after a stop request is up.
class LeaseKeeper {
 public:
  LeaseKeeper(Daemon::Impl& daemon, Slot& slot, int64_t job_id)
      : d_(daemon), slot_(slot), job_id_(job_id) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~LeaseKeeper() { Finish(); }
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Finish() {
    {
      std::lock_guard lock(d_.mu_);
      if (finished_) return;
      finished_ = true;
    }
    d_.cv_.notify_all();
    thread_.join();
  }
  // Runs the store call that ends the job (`call` returns a Result) so that no renewal overlaps
  // it, and stops renewing once it succeeded: a renewal after the job ended would report a lost
  // lease that is not one.
  template <typename Call>
  auto Settle(Call call) {
    std::lock_guard lock(call_mu_);
    auto result = call();
    if (result.ok()) settled_ = true;
    return result;
  }
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }
  bool lost() const { return lost_.load(); }
  bool drain_expired() const { return drain_expired_.load(); }

 private:
  void Loop() {
    const milliseconds renew_every = std::max(milliseconds(100), d_.config_.lease / 3);
    Backoff backoff(d_.config_.retry_initial, std::min(renew_every, d_.config_.retry_max),
                    kRetryJitter);
    Clock::time_point next_renew = Clock::now() + renew_every;
    std::unique_lock lock(d_.mu_);
    while (!finished_) {
      Clock::time_point wake = next_renew;
      if (d_.stop_requested_ && !drain_expired_) wake = std::min(wake, d_.drain_deadline_);
      const int generation = d_.stop_generation_;
      d_.cv_.wait_until(lock, wake, [&] { return finished_ || d_.stop_generation_ != generation; });
      if (finished_) break;
      const Clock::time_point now = Clock::now();
      if (d_.stop_requested_ && now >= d_.drain_deadline_ && !drain_expired_) {
        drain_expired_ = true;
        cancel_ = true;
        spdlog::info("[{}] drain time is up: cancelling job {} to release it", slot_.device.slot,
                     job_id_);
      }
      if (lost_ || now < next_renew) continue;
      lock.unlock();
      Status renewed;
      {
        std::lock_guard call_lock(call_mu_);
        if (!settled_) renewed = d_.store_.RenewLease(job_id_, slot_.worker_id, d_.config_.lease);
      }
      lock.lock();
      if (renewed.ok()) {
        d_.health_.Succeeded();
        backoff.Reset();
        next_renew = Clock::now() + renew_every;
        spdlog::trace("[{}] renewed the lease of job {}", slot_.device.slot, job_id_);
      } else if (renewed.code() == StatusCode::kFailedPrecondition ||
                 renewed.code() == StatusCode::kNotFound) {
        lost_ = true;
        cancel_ = true;
        next_renew = Clock::now() + std::chrono::hours(1);  // nothing left to renew
        spdlog::warn("[{}] lost the lease of job {}; abandoning it, nothing will be written: {}",
                     slot_.device.slot, job_id_, renewed.ToString());
      } else {
        d_.health_.Failed(slot_.device.slot, renewed);
        next_renew = Clock::now() + backoff.Next();
      }
    }
  }

  Daemon::Impl& d_;
  Slot& slot_;
  const int64_t job_id_;
  std::thread thread_;
  bool finished_ = false;  // guarded by d_.mu_
  std::mutex call_mu_;     // serialises renewals with the call that ends the job
  bool settled_ = false;   // guarded by call_mu_
  std::atomic<bool> cancel_{false};
  std::atomic<bool> lost_{false};
  std::atomic<bool> drain_expired_{false};
};

void Daemon::Impl::RequestStop(bool immediate) {
  {
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    if (!stop_requested_) {
      stop_requested_ = true;
      drain_deadline_ = immediate ? now : now + config_.drain;
    } else if (immediate) {
      drain_deadline_ = std::min(drain_deadline_, now);
    }
    ++stop_generation_;
  }
  cv_.notify_all();
}

Status Daemon::Impl::Register(Slot& slot) {
  Backoff backoff = RetryBackoff();
  bool warned = false;
  while (true) {
    const Status st = store_.RegisterWorker(slot.worker_id, config_.host, slot.fingerprint);
    if (st.ok()) {
      health_.Succeeded();
      RecordHeartbeat();
      slot.registered = true;
      spdlog::info("[{}] registered as worker {} (device {} {}, fingerprint {})", slot.device.slot,
                   slot.worker_id, slot.fingerprint.backend, slot.fingerprint.name,
                   store::FormatHash(slot.device_hash));
      return Status::Ok();
    }
    if (st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kAlreadyExists) {
      return st.WithContext("registering worker " + slot.worker_id);
    }
    if (IsTransient(st)) {
      health_.Failed(slot.device.slot, st);
    } else if (!warned) {
      // E.g. the schema is not migrated yet: the server (or `ucudnn migrate`) may fix it soon.
      spdlog::error("[{}] cannot register worker {}, retrying: {}", slot.device.slot,
                    slot.worker_id, st.ToString());
      warned = true;
    }
    if (SleepOrStop(backoff.Next())) {
      return Unavailable("stopped before worker " + slot.worker_id + " could register");
    }
  }
}

void Daemon::Impl::HeartbeatLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait_for(lock, config_.heartbeat, [&] { return loops_finished_; });
    if (loops_finished_) return;
    lock.unlock();
    for (auto& slot : slots_) {
      // A lost device's worker stops heartbeating: the catalog shows it dead, as it is.
      if (!slot->registered || slot->lost || store_.schema_too_new()) continue;
      Status st = store_.Heartbeat(slot->worker_id);
      if (st.code() == StatusCode::kNotFound) {
        // The row went away (database restored, operator cleanup): register again.
        spdlog::warn("[{}] worker {} is no longer registered; registering again", slot->device.slot,
                     slot->worker_id);
        st = store_.RegisterWorker(slot->worker_id, config_.host, slot->fingerprint);
      }
      if (st.ok()) {
        health_.Succeeded();
        RecordHeartbeat();
      } else if (IsTransient(st)) {
        health_.Failed("heartbeat", st);
      } else {
        spdlog::error("[{}] heartbeat failed: {}", slot->device.slot, st.ToString());
      }
    }
    lock.lock();
  }
}

void Daemon::Impl::JobsListenLoop() {
  constexpr milliseconds kWait{250};  // how soon the loop sees that the claim loops ended
  auto loops_finished = [this] {
    std::lock_guard lock(mu_);
    return loops_finished_;
  };
  std::unique_ptr<store::Listener> listener;
  Backoff backoff = RetryBackoff();
  bool warned = false;
  while (!loops_finished()) {
    if (listener == nullptr) {
      auto opened = store::Listener::Open(config_.jobs_listen_url, store::kJobsChannel);
      if (!opened.ok()) {
        if (!warned) {
          spdlog::warn("job notifications unavailable, claiming at each poll until they are: {}",
                       opened.status().ToString());
          warned = true;
        }
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, backoff.Next(), [&] { return loops_finished_; });
        continue;
      }
      listener = std::move(opened).value();
      backoff.Reset();
      if (warned) spdlog::info("job notifications available again");
      warned = false;
    }
    // A broken connection answers an error; the listener reconnects (paced) on the next wait.
    auto notified = listener->WaitForNotification(kWait);
    if (!notified.ok()) continue;
    const bool ours = std::any_of(notified->begin(), notified->end(), [&](const auto& n) {
      return std::any_of(slots_.begin(), slots_.end(),
                         [&](const auto& slot) { return slot->device_hash == n.device_hash; });
    });
    if (!ours) continue;
    {
      std::lock_guard lock(mu_);
      ++jobs_notified_;
    }
    cv_.notify_all();
  }
}

void Daemon::Impl::SlotLoop(Slot& slot) {
  Backoff backoff = RetryBackoff();
  Backoff failure_backoff(milliseconds(1000), milliseconds(60000), kRetryJitter);
  int consecutive_failures = 0;
  bool gate_busy = false;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::mt19937_64 rng(std::random_device{}());
  while (!stop_requested()) {
    // A schema migrated past this binary while it runs: claim nothing (the store refuses every
    // write and logs why, once) until the schema is one this binary knows again.
    if (store_.RecheckSchema().code() == StatusCode::kFailedPrecondition) {
      if (SleepOrStop(Jittered(config_.poll, kPollJitter, unit(rng)))) return;
      continue;
    }
    // A GPU that runs other work (a training job) is left to it: nothing is claimed until it is
    // idle, so the queue's jobs go to idle workers meanwhile.
    if (slot.device.gate != nullptr && !slot.device.gate->IdleForClaim()) {
      if (!gate_busy) {
        gate_busy = true;
        ++claims_put_off_;
        spdlog::info("[{}] idle gate: the GPU runs other work; not claiming until it is idle",
                     slot.device.slot);
      }
      // Looked at as often as the gate looks while paused: the GPU's other work (a job's first
      // step) may end within the claim poll.
      const milliseconds look = std::min(config_.poll, slot.device.gate->poll());
      if (SleepOrStop(Jittered(look, kPollJitter, unit(rng)))) return;
      continue;
    }
    if (gate_busy) {
      gate_busy = false;
      spdlog::info("[{}] idle gate: the GPU is idle; claiming again", slot.device.slot);
    }
    // Read before the claim: a job queued after it wakes the wait for work below.
    const uint64_t jobs_notified = JobsNotified();
    auto claimed =
        store_.ClaimJob(slot.device_hash, slot.worker_id, config_.lease, config_.max_attempts);
    if (!claimed.ok()) {
      const Status& st = claimed.status();
      if (IsTransient(st)) {
        health_.Failed(slot.device.slot, st);
      } else if (st.code() == StatusCode::kFailedPrecondition) {
        // Not registered (any more), or the schema is not there yet.
        spdlog::warn("[{}] claim refused, registering again: {}", slot.device.slot, st.ToString());
        const Status registered = Register(slot);
        if (!registered.ok()) {
          if (!stop_requested()) spdlog::error("[{}] {}", slot.device.slot, registered.ToString());
          return;
        }
      } else {
        spdlog::error("[{}] claiming a job failed: {}", slot.device.slot, st.ToString());
      }
      if (SleepOrStop(backoff.Next())) return;
      continue;
    }
    health_.Succeeded();
    backoff.Reset();
    if (!claimed->has_value()) {
      if (config_.once) {
        spdlog::info("[{}] queue drained for fingerprint {}", slot.device.slot,
                     store::FormatHash(slot.device_hash));
        return;
      }
      if (SleepUntilJobOrStop(Jittered(config_.poll, kPollJitter, unit(rng)), jobs_notified)) {
        return;
      }
      continue;
    }
    ++claimed_;
    const bool benchmarked = RunJob(slot, **claimed);
    if (slot.lost) return;
    if (benchmarked) {
      consecutive_failures = 0;
      failure_backoff.Reset();
    } else if (++consecutive_failures >= 2) {
      // A device that fails every job (e.g. a GPU in a bad state) must not burn through the
      // queue's attempts: pause before the next claim, longer each time.
      const milliseconds pause = failure_backoff.Next();
      spdlog::warn(
          "[{}] {} jobs failed in a row on this device; pausing {:.1f} s before the "
          "next claim",
          slot.device.slot, consecutive_failures, pause.count() / 1000.0);
      if (SleepOrStop(pause)) return;
    }
  }
}

bool Daemon::Impl::RunJob(Slot& slot, const store::Job& job) {
  ConvBackend& backend = *slot.device.backend;
  const size_t sizes = MicroBatchSizes(job.policy, job.max_micro_batch).size();
  const size_t algos = backend.Algorithms(job.problem.op).size();
  const std::string key = CanonicalKey(job.problem);
  spdlog::info(
      "[{}] job {} claimed (attempt {}): {} up to micro-batch {} ({}{}), {} sizes x {} "
      "algorithms{}; problem {}",
      slot.device.slot, job.id, job.attempts, Describe(job.problem), job.max_micro_batch,
      ToString(job.policy),
      job.workspace_limit ? ", the sizes a " + FormatBytes(*job.workspace_limit) + " limit uses"
                          : std::string(),
      sizes, algos, job.workspace_limit ? " at most" : "", key);

  const Clock::time_point start = Clock::now();
  LeaseKeeper keeper(*this, slot, job.id);
  BenchmarkOptions options = config_.benchmark;
  options.cancel = keeper.cancel_flag();
  // A pause for other work keeps the job's lease (the keeper renews it) and what was measured:
  // the job is one problem, so the model's other problems stay claimable by idle workers, and
  // the benchmark resumes at the configuration it stopped before. A stop request still cancels;
  // a pause longer than the gate's max_pause stores what was measured and releases the job.
  options.gate = slot.device.gate.get();
  const std::map<std::string, std::string> prior = LoadPrior(slot, job);
  if (!prior.empty()) options.prior = &prior;
  // The first configuration is reported at once (the job is under way), then one line every
  // progress_log_interval.
  Clock::time_point last_log = start - config_.progress_log_interval;
  slot.configurations_done = 0;
  slot.configurations_total = static_cast<int64_t>(sizes * algos);
  slot.job_id = job.id;
  // Every finished entry, stored before the job is given back should the gate give up waiting.
  std::vector<Timing> finished;
  auto progress = [&](const BenchmarkProgress& p) {
    slot.configurations_done = static_cast<int64_t>(p.done);
    slot.configurations_total = static_cast<int64_t>(p.total);
    if (p.latest != nullptr) {
      finished.push_back(*p.latest);
      ++configurations_measured_;
      spdlog::debug("[{}] job {}: {}/{} micro-batch {} algo {}: {} {:.4f} ms, workspace {}",
                    slot.device.slot, job.id, p.done, p.total, p.latest->micro_batch,
                    AlgorithmText(AlgorithmOf(*p.latest)), ToString(p.latest->status),
                    p.latest->time_ms, FormatBytes(p.latest->workspace_bytes));
    }
    if (Clock::now() - last_log >= config_.progress_log_interval) {
      last_log = Clock::now();
      spdlog::info(
          "[{}] job {} ({}): {}/{} configurations ({} sizes x {} algorithms), "
          "{:.1f} s",
          slot.device.slot, job.id, Describe(job.problem), p.done, p.total, sizes, algos,
          SecondsSince(start));
    }
  };
  // A job for a workspace limit times the sizes the limit can use (core/size_rule.h), in
  // rounds, from what the store holds of the problem already; one without, every size.
  Result<TimingTable> table =
      job.workspace_limit.has_value()
          ? BenchmarkForLimit(backend, job.problem, job.max_micro_batch, job.policy,
                              *job.workspace_limit, LoadKnown(slot, job), options, progress)
          : BenchmarkProblem(backend, job.problem, job.max_micro_batch, job.policy, options,
                             progress);
  const double elapsed = SecondsSince(start);
  slot.job_id = 0;

  // A lost device measured nothing trustworthy: nothing is written and this slot stops. The
  // attempt counts as failed, so the job goes back to the queue for another device while it has
  // attempts left, and a problem that keeps killing devices fails for good instead of
  // circulating among the workers forever.
  const bool device_lost = !table.ok() && table.status().code() == StatusCode::kDeviceLost;
  if (device_lost) {
    spdlog::critical(
        "[{}] device lost while benchmarking job {} after {:.1f} s: {}; nothing is written, the "
        "attempt counts as failed, and this device's thread stops (restart the worker to use it "
        "again)",
        slot.device.slot, job.id, elapsed, table.status().ToString());
    MarkLost(slot, table.status());
  }
  if (keeper.lost()) {
    ++abandoned_;
    spdlog::warn("[{}] job {} abandoned after {:.1f} s: lease lost", slot.device.slot, job.id,
                 elapsed);
    return true;
  }
  if (!device_lost && keeper.drain_expired() && !table.ok()) {
    keeper.Finish();
    Release(slot, job);
    return true;
  }
  if (!table.ok() && slot.device.gate != nullptr && slot.device.gate->gave_up()) {
    // The GPU has run other work for --idle-max-pause-seconds: what was measured is stored
    // (nothing lost; the planner can use it at once) and the job goes back to the queue for a
    // worker whose GPU is idle, instead of waiting here for the training to end.
    keeper.Finish();
    StorePartial(slot, job, finished);
    Release(slot, job);
    return true;
  }
  Outcome outcome;
  if (table.ok()) {
    outcome = Complete(slot, job, *table, keeper, elapsed);
  } else {
    spdlog::error("[{}] job {} failed after {:.1f} s: {}", slot.device.slot, job.id, elapsed,
                  table.status().ToString());
    outcome = Fail(slot, job, table.status(), keeper);
  }
  if (outcome == Outcome::kLost || outcome == Outcome::kGaveUp) ++abandoned_;
  return table.ok();
}

void Daemon::Impl::MarkLost(Slot& slot, const Status& status) {
  slot.lost_status = status;
  slot.lost = true;
  const int64_t lost = ++devices_lost_;
  if (lost == static_cast<int64_t>(slots_.size())) {
    spdlog::critical("every device of this worker is lost; stopping");
    RequestStop(/*immediate=*/true);
  }
}

Daemon::Impl::Holder Daemon::Impl::CheckHolder(const Slot& slot, const store::Job& claimed,
                                               const TimingTable& table) {
  Backoff backoff = RetryBackoff();
  std::optional<store::Job> job;
  while (true) {
    Status st;
    if (!job) {
      auto read = store_.GetJob(claimed.id);
      if (read.ok()) {
        job = std::move(read).value();
        if (job->worker_id == slot.worker_id && job->state == store::JobState::kRunning) {
          health_.Succeeded();
          return Holder::kHeldByUs;
        }
      } else if (read.status().code() == StatusCode::kNotFound) {
        return Holder::kNotOurs;
      } else {
        st = read.status();
      }
    }
    if (job) {
      // Not (or no longer) held by us. Done with us as its last holder is our completion. But a
      // completion that found the job widened re-queued it with no holder, after which another
      // worker may hold or even have finished it: only the timing rows tell whether ours
      // committed.
      auto records = store_.GetTimingRecords(slot.fingerprint, claimed.problem);
      if (records.ok()) {
        health_.Succeeded();
        return CompletionCommitted(claimed, *job, *records, table.entries, slot.worker_id)
                   ? Holder::kDoneByUs
                   : Holder::kNotOurs;
      }
      st = records.status();
    }
    if (!IsTransient(st)) return Holder::kUnknown;
    health_.Failed(slot.device.slot, st);
    if (DrainExpired()) return Holder::kUnknown;
    SleepWithinDrain(backoff.Next());
  }
}

Daemon::Impl::Outcome Daemon::Impl::Complete(Slot& slot, const store::Job& job,
                                             const TimingTable& table, LeaseKeeper& keeper,
                                             double elapsed_s) {
  int ok = 0, unsupported = 0, failed = 0;
  for (const Timing& t : table.entries) {
    (t.status == TimingStatus::kOk            ? ok
     : t.status == TimingStatus::kUnsupported ? unsupported
                                              : failed)++;
  }
  Backoff backoff = RetryBackoff();
  bool uncertain = false;  // an earlier attempt may have committed before its reply was lost
  while (true) {
    // (The store keeps another worker's measurements over our worker-limit entries.)
    auto attempt = [&]() -> Result<store::JobState> {
      return keeper.Settle(
          [&] { return store_.CompleteJob(job.id, slot.worker_id, table.entries); });
    };
    auto state = attempt();
    if (state.ok()) {
      health_.Succeeded();
      ++completed_;
      spdlog::info(
          "[{}] job {} {}: {} timings ({} ok, {} unsupported, {} failed) in {:.1f} s; "
          "problem {}",
          slot.device.slot, job.id,
          *state == store::JobState::kDone ? "done" : "stored, re-queued (widened)",
          table.entries.size(), ok, unsupported, failed, elapsed_s, CanonicalKey(job.problem));
      return Outcome::kDone;
    }
    const Status& st = state.status();
    if (st.code() == StatusCode::kFailedPrecondition || st.code() == StatusCode::kNotFound) {
      const Holder holder = CheckHolder(slot, job, table);
      if (holder == Holder::kDoneByUs && uncertain) {
        ++completed_;
        spdlog::info(
            "[{}] job {} completed: its timings were written, the first reply was lost "
            "(a job widened meanwhile was re-queued by that completion)",
            slot.device.slot, job.id);
        return Outcome::kDone;
      }
      if (holder != Holder::kHeldByUs) {
        spdlog::warn(
            "[{}] job {}: lease lost before the timings were written; discarded "
            "(another worker measures it): {}",
            slot.device.slot, job.id, st.ToString());
        return Outcome::kLost;
      }
      // Still ours: e.g. a read-only database during a fail-over. Retry like an outage.
    } else if (!IsTransient(st)) {
      spdlog::error("[{}] job {}: the store refused the timings: {}", slot.device.slot, job.id,
                    st.ToString());
      return Fail(slot, job, st, keeper);
    }
    uncertain = true;
    health_.Failed(slot.device.slot, st);
    if (keeper.lost()) return Outcome::kLost;
    if (DrainExpired()) {
      spdlog::warn(
          "[{}] job {}: drain time is up while the database is away; its timings are "
          "dropped and the job returns to the queue when its lease expires",
          slot.device.slot, job.id);
      return Outcome::kGaveUp;
    }
    SleepWithinDrain(backoff.Next());
  }
}

Daemon::Impl::Outcome Daemon::Impl::Fail(Slot& slot, const store::Job& job, const Status& error,
                                         LeaseKeeper& keeper) {
  Backoff backoff = RetryBackoff();
  while (true) {
    auto state = keeper.Settle([&] {
      return store_.FailJob(job.id, slot.worker_id, error.ToString(), config_.max_attempts);
    });
    if (state.ok()) {
      health_.Succeeded();
      ++failed_;
      spdlog::warn("[{}] job {} recorded as failed attempt {} of {}; now {}", slot.device.slot,
                   job.id, job.attempts, config_.max_attempts, store::ToString(*state));
      return Outcome::kDone;
    }
    const Status& st = state.status();
    if (!IsTransient(st)) {
      spdlog::warn("[{}] job {}: could not record the failure: {}", slot.device.slot, job.id,
                   st.ToString());
      return Outcome::kLost;
    }
    health_.Failed(slot.device.slot, st);
    if (keeper.lost() || DrainExpired()) return Outcome::kGaveUp;
    SleepWithinDrain(backoff.Next());
  }
}

// The newest done jobs looked at for nearby problems: one query's worth, enough to cover a few
// networks of one device.
constexpr int kPriorJobs = 2000;

TimingTable Daemon::Impl::LoadKnown(const Slot& slot, const store::Job& job) {
  auto known = store_.GetTimings(slot.fingerprint, job.problem);
  if (!known.ok()) {
    spdlog::warn(
        "[{}] job {}: the stored timings of its problem could not be read ({}); its "
        "sizes are searched from scratch",
        slot.device.slot, job.id, known.status().ToString());
    return {};
  }
  return std::move(known).value();
}

std::map<std::string, std::string> Daemon::Impl::LoadPrior(const Slot& slot,
                                                           const store::Job& job) {
  if (!config_.use_prior || config_.benchmark.prune_margin < 0) return {};
  // An optimisation only: any error leaves the search complete.
  auto done = store_.ListJobs(store::JobState::kDone, kPriorJobs);
  if (!done.ok()) {
    spdlog::debug("[{}] no search prior: {}", slot.device.slot, done.status().ToString());
    return {};
  }
  std::vector<ConvProblem> nearby;
  for (const store::Job& j : *done) {
    if (j.device_hash == slot.device_hash && Nearby(job.problem, j.problem)) {
      nearby.push_back(j.problem);
    }
  }
  if (static_cast<int>(nearby.size()) < kPriorMinNeighbours) return {};
  auto tables = store_.GetTimingsForProblems(slot.fingerprint, nearby);
  if (!tables.ok()) {
    spdlog::debug("[{}] no search prior: {}", slot.device.slot, tables.status().ToString());
    return {};
  }
  std::vector<KnownTable> known;
  for (size_t i = 0; i < nearby.size(); ++i) known.push_back({nearby[i], (*tables)[i]});
  std::map<std::string, std::string> losers = PriorLosers(job.problem, known);
  if (!losers.empty()) {
    spdlog::info(
        "[{}] job {}: {} configurations not timed from micro-batch {} (lost on every "
        "one of the device's nearby problems)",
        slot.device.slot, job.id, losers.size(), kPriorFromMicroBatch);
  }
  return losers;
}

void Daemon::Impl::StorePartial(Slot& slot, const store::Job& job,
                                const std::vector<Timing>& finished) {
  if (finished.empty()) return;
  Backoff backoff = RetryBackoff();
  const Clock::time_point give_up = Clock::now() + std::min(config_.lease, milliseconds(10000));
  while (true) {
    const Status st = store_.PutTimings(slot.fingerprint, job.problem, finished, slot.worker_id);
    if (st.ok()) {
      health_.Succeeded();
      spdlog::info("[{}] job {}: {} timings measured before the pause stored", slot.device.slot,
                   job.id, finished.size());
      return;
    }
    if (!IsTransient(st) || Clock::now() >= give_up) {
      spdlog::warn("[{}] job {}: the {} timings measured before the pause were not stored: {}",
                   slot.device.slot, job.id, finished.size(), st.ToString());
      return;
    }
    health_.Failed(slot.device.slot, st);
    std::this_thread::sleep_for(std::min(backoff.Next(), milliseconds(1000)));
  }
}

void Daemon::Impl::Release(Slot& slot, const store::Job& job) {
  // Shutting down or the device lost: try for a while; if the database stays away the lease
  // expiry returns the job.
  Backoff backoff = RetryBackoff();
  const Clock::time_point give_up = Clock::now() + std::min(config_.lease, milliseconds(10000));
  while (true) {
    const Status st = store_.ReleaseJob(job.id, slot.worker_id);
    if (st.ok()) {
      health_.Succeeded();
      ++released_;
      spdlog::info("[{}] job {} released to the queue", slot.device.slot, job.id);
      return;
    }
    if (!IsTransient(st) || Clock::now() >= give_up) {
      ++abandoned_;
      spdlog::warn(
          "[{}] job {} not released ({}); it returns to the queue when its lease "
          "expires",
          slot.device.slot, job.id, st.ToString());
      return;
    }
    health_.Failed(slot.device.slot, st);
    std::this_thread::sleep_for(std::min(backoff.Next(), milliseconds(1000)));
  }
}

Status Daemon::Impl::Run() {
  {
    std::lock_guard lock(mu_);
    if (ran_) return FailedPrecondition("Daemon::Run: already ran");
    ran_ = true;
  }
  UCUDNN_RETURN_IF_ERROR(Validate(config_));
  if (slots_.empty()) return InvalidArgument("devices: at least one device is needed");
  for (const auto& slot : slots_) {
    if (!slot->device.backend) {
      return InvalidArgument("devices[" + slot->device.slot + "].backend: missing");
    }
  }

  std::mutex error_mu;
  Status fatal;
  std::thread heartbeat([this] { HeartbeatLoop(); });
  std::thread jobs_listener;
  if (!config_.jobs_listen_url.empty()) jobs_listener = std::thread([this] { JobsListenLoop(); });
  std::vector<std::thread> threads;
  for (auto& slot : slots_) {
    threads.emplace_back([&, s = slot.get()] {
      const Status registered = Register(*s);
      if (!registered.ok()) {
        if (!stop_requested()) {
          spdlog::error("[{}] {}", s->device.slot, registered.ToString());
          std::lock_guard lock(error_mu);
          if (fatal.ok()) fatal = registered;
          RequestStop(/*immediate=*/true);
        }
        return;
      }
      SlotLoop(*s);
      spdlog::debug("[{}] benchmarking thread ends", s->device.slot);
    });
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(mu_);
    loops_finished_ = true;
  }
  cv_.notify_all();
  heartbeat.join();
  if (jobs_listener.joinable()) jobs_listener.join();
  // A clean stop shows in the catalog at once, not once the heartbeat ages out; a lost device's
  // worker is left to show dead, as it is.
  for (const auto& slot : slots_) {
    if (!slot->registered || slot->lost) continue;
    if (const Status st = store_.MarkWorkerStopped(slot->worker_id); !st.ok()) {
      spdlog::warn("[{}] could not mark worker {} stopped: {}", slot->device.slot, slot->worker_id,
                   st.ToString());
    }
  }
  const DaemonStats s = stats();
  spdlog::info(
      "worker stopped: {} claimed, {} completed, {} failed, {} released, {} abandoned, {} "
      "device(s) lost",
      s.claimed, s.completed, s.failed, s.released, s.abandoned, s.devices_lost);
  if (!fatal.ok()) return fatal;
  // A lost device comes back only with a new process: say so, so that the exit status tells a
  // supervisor to restart the worker.
  std::string lost;
  for (const auto& slot : slots_) {
    if (!slot->lost) continue;
    lost += (lost.empty() ? "" : "; ") + slot->device.slot + ": " + slot->lost_status.message();
  }
  if (!lost.empty()) return DeviceLost("device lost (restart the worker to use it again): " + lost);
  return Status::Ok();
}

Status Validate(const DaemonConfig& c) {
  if (c.id_prefix.empty()) return InvalidArgument("id_prefix: must not be empty");
  if (c.lease < milliseconds(100)) return InvalidArgument("lease: must be at least 100 ms");
  if (c.heartbeat <= milliseconds(0)) return InvalidArgument("heartbeat: must be positive");
  if (c.poll <= milliseconds(0)) return InvalidArgument("poll: must be positive");
  if (c.drain < milliseconds(0)) return InvalidArgument("drain: must not be negative");
  if (c.retry_initial <= milliseconds(0) || c.retry_max < c.retry_initial) {
    return InvalidArgument("retry_initial/retry_max: need 0 < initial <= max");
  }
  if (c.max_attempts < 1) return InvalidArgument("max_attempts: must be at least 1");
  return Validate(c.benchmark);
}

Daemon::Daemon(store::Store& store, std::vector<BenchmarkDevice> devices, DaemonConfig config)
    : impl_(std::make_unique<Impl>(store, std::move(devices), std::move(config))) {}
Daemon::~Daemon() { impl_->RequestStop(/*immediate=*/true); }
Status Daemon::Run() { return impl_->Run(); }
void Daemon::RequestStop(bool immediate) { impl_->RequestStop(immediate); }
bool Daemon::stop_requested() const { return impl_->stop_requested(); }
std::vector<std::string> Daemon::worker_ids() const { return impl_->worker_ids(); }
std::vector<uint64_t> Daemon::device_hashes() const { return impl_->device_hashes(); }
DaemonStats Daemon::stats() const { return impl_->stats(); }

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string DefaultWorkerIdPrefix() { return HostName() + ":" + std::to_string(getpid()); }

}  // namespace ucudnn::worker
