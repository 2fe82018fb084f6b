// Benchmark jobs the planner enqueued or read lately, kept for a short time, so that a burst of
// plan requests for the same missing problems (a training job's processes all starting at once)
// asks the database once per problem rather than once per request, when it enqueues and again
// when it reports the jobs' states at the end of its wait. What it says may be up to the TTL old:
// a job that finished or failed meanwhile is reported in the state it had (the timings that land
// are read anyway).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/server/lru_cache.h"

namespace ucudnn::server {

class RecentJobs {
 public:
  using Clock = std::chrono::steady_clock;

  // What a plan request enqueues: a job measuring (device, problem) at these sizes.
  struct Key {
    uint64_t device_hash = 0;
    uint64_t problem_hash = 0;
    BatchPolicy policy = BatchPolicy::kPowerOfTwo;
    int64_t max_micro_batch = 0;
    std::optional<uint64_t> workspace_limit;  // none: every size of the policy
    bool operator==(const Key&) const = default;
  };
  struct Job {
    int64_t id = 0;
    std::string state;  // store::ToString of its JobState
    std::string error;  // when failed
  };

  // ttl 0 disables it (every lookup misses).
  RecentJobs(std::chrono::milliseconds ttl, size_t capacity)
      : ttl_(ttl), enqueued_(capacity), jobs_(capacity) {}

  // The job of every key, when each was enqueued (or its state read) within the TTL; nullopt when
  // any is missing or older.
  std::optional<std::vector<Job>> Enqueued(const std::vector<Key>& keys, Clock::time_point now) {
    std::vector<Job> found;
    found.reserve(keys.size());
    for (const Key& key : keys) {
      const auto id = enqueued_.Get(key);
      if (!id || !Fresh(id->at, now)) return std::nullopt;
      auto job = Get(id->id, now);
      if (!job) return std::nullopt;
      found.push_back(std::move(*job));
    }
    return found;
  }
  void PutEnqueued(const Key& key, const Job& job, Clock::time_point now) {
    enqueued_.Put(key, std::make_shared<const JobId>(JobId{job.id, now}));
    Put(job, now);
  }

  // A job's state read within the TTL.
  std::optional<Job> Get(int64_t job_id, Clock::time_point now) {
    const auto entry = jobs_.Get(job_id);
    if (!entry || !Fresh(entry->at, now)) return std::nullopt;
    return entry->job;
  }

  // What is known of a job, and whether the caller is to read it again: when absent, or older
  // than the TTL. An old entry then counts as fresh for the other callers until that read is
  // Put (stale while revalidating), so a burst of requests whose entries expire together reads
  // each job once, not once per request.
  struct Lookup {
    std::optional<Job> job;
    bool read_again = false;
  };
  Lookup GetOrClaim(int64_t job_id, Clock::time_point now) {
    const auto entry = jobs_.Get(job_id);
    if (!entry) return {std::nullopt, true};
    if (Fresh(entry->at, now)) return {entry->job, false};
    Put(entry->job, now);
    return {entry->job, true};
  }
  void Put(const Job& job, Clock::time_point now) {
    jobs_.Put(job.id, std::make_shared<const JobEntry>(JobEntry{job, now}));
  }

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(k.device_hash * 31 + k.problem_hash) ^
             std::hash<int64_t>{}(k.max_micro_batch * 4 + static_cast<int64_t>(k.policy)) ^
             std::hash<uint64_t>{}(k.workspace_limit.value_or(~uint64_t{0}) * 7);
    }
  };
  struct JobId {
    int64_t id = 0;
    Clock::time_point at;
  };
  struct JobEntry {
    Job job;
    Clock::time_point at;
  };
  bool Fresh(Clock::time_point at, Clock::time_point now) const { return now - at < ttl_; }

  const std::chrono::milliseconds ttl_;
  LruCache<Key, JobId, KeyHash> enqueued_;
  LruCache<int64_t, JobEntry> jobs_;
};

}  // namespace ucudnn::server
