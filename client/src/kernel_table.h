// The table the hot path reads: one entry per kernel (problem, mini-batch), found by one hash
// lookup without locks or allocation, with the kernel's plan published through an atomic pointer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ucudnn/client/stats.h"
#include "ucudnn/core/executor.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::client {

// A hash of every field of the problem and the batch: no canonical string, no allocation.
// Only for this process's table (StableHash is the cross-machine key). Kernels of one problem
// and batch at several limits (Session: kernels by limit) share it.
uint64_t KernelKeyHash(const ConvProblem& problem, int64_t batch);

// One kernel's plan as the hot path uses it. Immutable once published, except for the
// verification cache, which any caller thread may fill (all fill it with the same value), and
// the failure flag.
struct PlanEntry {
  PlanEntry() = default;
  ~PlanEntry() { delete runner.load(std::memory_order_relaxed); }
  PlanEntry(const PlanEntry&) = delete;
  PlanEntry& operator=(const PlanEntry&) = delete;

  std::vector<Segment> segments;
  uint64_t workspace_bytes = 0;  // as planned (largest segment)
  double predicted_ms = 0;
  double undivided_ms = 0;  // 0 when the planner had no undivided baseline
  uint64_t limit = 0;       // the per-kernel limit or the network budget it was planned for
  bool from_cache = false;
  // The plan is the framework's own convolution (one kFrameworkAlgo segment): never verified or
  // run here; the caller runs its own convolution (the drop-in handle: cuDNN's own choice).
  bool framework = false;
  // Total modes: the slice of the library's workspace this kernel uses.
  bool library_workspace = false;
  size_t workspace_offset = 0;
  size_t workspace_slice = 0;

  // The workspace the plan needs on this backend, checked once on a caller thread (the backend
  // may only be used there): kUnverified until then, kNotRunnable when a segment's algorithm is
  // rejected here.
  static constexpr int64_t kUnverified = -1;
  static constexpr int64_t kNotRunnable = -2;
  mutable std::atomic<int64_t> required_bytes{kUnverified};
  // What the backend resolved for this plan's segments (the cuDNN handle: descriptors per
  // micro-batch size), bound with the verification when the session has a PlanBinder; owned.
  // Null: segments run through the backend's Run().
  mutable std::atomic<MicroBatchRunner*> runner{nullptr};
  // Set once ExecuteMicroBatched ran the plan here with all its checks; later calls run the
  // segments directly (RunMicroBatches).
  mutable std::atomic<bool> executed{false};
  // Set when running the plan failed; the kernel then runs undivided.
  mutable std::atomic<bool> failed{false};
};

// One kernel. The identity fields are written before the entry is published and never change.
struct KernelState {
  uint64_t hash = 0;
  ConvProblem problem;
  int64_t batch = 0;
  std::string name;
  // Per-kernel mode: the limit its plan is asked for (the workspace of its declaration or first
  // call). Total modes: unused.
  uint64_t limit = 0;

  std::atomic<const PlanEntry*> plan{nullptr};
  // Cache of the fallback algorithm for the last two workspace sizes (frameworks that alternate
  // between two workspaces do not re-run the heuristics every call): each slot is
  // (workspace bytes << 16) | (algo + 1), 0 when empty, packed into one word so a reader never
  // sees the algorithm of one size with another size. New choices replace the slot
  // `fallback_next` names.
  static constexpr size_t kFallbackSlots = 2;
  std::atomic<uint64_t> fallback_choice[kFallbackSlots] = {};
  std::atomic<uint32_t> fallback_next{0};

  std::atomic<uint64_t> planned_calls{0};
  std::atomic<uint64_t> fallback_calls{0};
  std::atomic<uint64_t> rejected_calls{0};
  // Calls whose plan failed while running and that were completed by the fallback.
  std::atomic<uint64_t> recovered_calls{0};
  // Calls of a framework plan (PlanEntry::framework).
  std::atomic<uint64_t> framework_calls{0};

  // Written by the planner thread under the session's mutex; read by reports under it.
  KernelReport::State state = KernelReport::State::kWaiting;
  std::string reason;
  // The framework's measured time for this kernel and that timing's workspace, as the server's
  // last answer (or the plan cache's record of one) said (0: unknown).
  double framework_ms = 0;
  uint64_t framework_workspace_bytes = 0;
  void KnowFramework(const KernelPlan& answer) {
    framework_ms = answer.framework_ms;
    framework_workspace_bytes = answer.framework_workspace_bytes;
  }
  // The session's contribution epoch when timings of this kernel's problem were last submitted:
  // an answer to a request sent before then is stale where it says the timings are missing.
  uint64_t contributed_epoch = 0;
};

// Open addressing with linear probing over atomic pointers. Readers never lock; one writer at a
// time inserts (the session serialises inserts with a mutex). Entries are never removed, so a
// reader's pointer stays valid for the table's lifetime.
class KernelTable {
 public:
  // Holds up to `max_kernels` entries, at most half full so probes stay short.
  explicit KernelTable(size_t max_kernels);
  ~KernelTable();
  KernelTable(const KernelTable&) = delete;
  KernelTable& operator=(const KernelTable&) = delete;

  // With `limit`, the entry of that limit only (Session: kernels by limit); without, the first
  // inserted of any limit.
  KernelState* Find(uint64_t hash, const ConvProblem& problem, int64_t batch,
                    std::optional<uint64_t> limit = std::nullopt) const {
    size_t i = hash & mask_;
    for (;;) {
      KernelState* state = slots_[i].load(std::memory_order_acquire);
      if (state == nullptr) return nullptr;
      if (state->hash == hash && state->batch == batch && state->problem == problem &&
          (!limit || state->limit == *limit)) {
        return state;
      }
      i = (i + 1) & mask_;
    }
  }

  // Takes ownership; nullptr when the table is full. Callers serialise inserts.
  KernelState* Insert(std::unique_ptr<KernelState> state);

  size_t size() const { return owned_.size(); }
  // Every entry, in insertion order (callers serialise with inserts).
  const std::vector<std::unique_ptr<KernelState>>& entries() const { return owned_; }

 private:
  std::unique_ptr<std::atomic<KernelState*>[]> slots_;
  size_t mask_ = 0;
  size_t max_entries_ = 0;
  std::vector<std::unique_ptr<KernelState>> owned_;
};

}  // namespace ucudnn::client
