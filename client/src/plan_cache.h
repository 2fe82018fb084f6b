// The local plan cache: plans kept in a file, keyed by device fingerprint and kernel, so that a
// restarted job runs its plans from the first step without the server.
//
// File format (version 1):
//   "ucudnn-plan-cache 1\n"                  a text line, so `head -1` says what the file is
//   uint64 little-endian payload size
//   uint64 little-endian FNV-1a 64 of the payload
//   payload: records, each a uint32 little-endian size and a serialized ucudnn.v1.Plan holding
//            the device, the workspace mode, policy and limit, and the planned kernels (one for a
//            per-kernel record, the whole network for a total-mode record).
// A file that fails any check is ignored as a whole, with a warning; it is replaced at the next
// save. Saves merge with the file's current records (another process may share it) and replace
// it atomically (temporary file + rename).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"

namespace ucudnn::client {

inline constexpr std::string_view kPlanCacheMagic = "ucudnn-plan-cache";
// 2: segments may name engine configurations (Segment.engine_config). Records are v1::Plan
// messages either way, so version 1 files still read; the bump makes an older build refuse a
// newer file by its version instead of by a segment it cannot validate.
// 3: plans may hold the framework's own convolution (algo -2) and name their framework.
// 4: plans of a framework that benchmarks in the job follow the planner's tie rule (dp.h
// FrameworkBenchmarks, planner revision 5): such records of older files are not read (the
// server plans those kernels again), the others are.
// 5: plans of grouped kernels come from timings of workers that warm up runtime-compiled engines
// at each size (schema 8 measures those problems again): older records holding a grouped kernel
// are not read.
inline constexpr int kPlanCacheVersion = 5;
inline constexpr int kTieRulePlanCacheVersion = 4;
inline constexpr int kGroupedRetimedPlanCacheVersion = 5;
inline constexpr int kOldestReadablePlanCacheVersion = 1;

// One cached answer: planned kernels only.
struct CacheRecord {
  DeviceFingerprint device;
  NetworkPlan plan;  // workspace_mode, policy, workspace_budget_bytes and kernels are the key
};

// The key a record is found by: device hash, mode, policy, limit, the framework identity the plan
// was asked with (NetworkPlan::framework; plans of different frameworks are never mixed), and
// the kernels (canonical key and mini-batch; sorted for total-mode records, whose order does not
// matter).
std::string CacheKey(const DeviceFingerprint& device, WorkspaceMode mode, BatchPolicy policy,
                     uint64_t limit, const std::vector<Kernel>& kernels,
                     std::string_view framework = {});
std::string CacheKey(const CacheRecord& record);

// The file's bytes and back (pure).
std::string SerializeCache(const std::vector<CacheRecord>& records);
// kInvalidArgument naming what is wrong (magic, version, size, checksum, record n).
Result<std::vector<CacheRecord>> ParseCache(std::string_view bytes);

class PlanCache {
 public:
  PlanCache() = default;
  // Reads `path`. A missing file is an empty cache; an unreadable or corrupt one is an empty
  // cache and a warning in the log.
  static PlanCache Load(const std::string& path);

  // Per-kernel record of this exact kernel and limit.
  std::optional<KernelPlan> FindKernel(const DeviceFingerprint& device, BatchPolicy policy,
                                       uint64_t limit, const Kernel& kernel,
                                       std::string_view framework = {}) const;
  // Total-mode record of exactly these kernels (any order) and budget.
  std::optional<NetworkPlan> FindNetwork(const DeviceFingerprint& device, WorkspaceMode mode,
                                         BatchPolicy policy, uint64_t budget,
                                         const std::vector<Kernel>& kernels,
                                         std::string_view framework = {}) const;
  void Put(CacheRecord record);

  // Merges into the file's current records (ours win) and replaces the file atomically,
  // creating its folder when needed.
  Status Save(const std::string& path) const;

  size_t size() const { return records_.size(); }

 private:
  std::map<std::string, CacheRecord> records_;
};

}  // namespace ucudnn::client
