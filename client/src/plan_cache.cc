#include "plan_cache.h"
#include "log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "ucudnn/core/dp.h"
#include "ucudnn/core/files.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/v1/ucudnn.pb.h"

namespace ucudnn::client {
namespace {

// Bounds that keep a damaged size field from asking for absurd memory.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxRecordBytes = uint32_t{1} << 26;

void PutLe(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return value;
}

std::string Header() {
  return std::string(kPlanCacheMagic) + " " + std::to_string(kPlanCacheVersion) + "\n";
}

std::string KernelKey(const Kernel& kernel) {
  return CanonicalKey(kernel.problem) + "@" + std::to_string(kernel.mini_batch);
}

bool HoldsGroupedKernel(const NetworkPlan& plan) {
  return std::any_of(plan.kernels.begin(), plan.kernels.end(),
                     [](const KernelPlan& k) { return k.kernel.problem.groups > 1; });
}

}  // namespace

std::string CacheKey(const DeviceFingerprint& device, WorkspaceMode mode, BatchPolicy policy,
                     uint64_t limit, const std::vector<Kernel>& kernels,
                     std::string_view framework) {
  std::vector<std::string> keys;
  keys.reserve(kernels.size());
  for (const Kernel& kernel : kernels) keys.push_back(KernelKey(kernel));
  if (mode != WorkspaceMode::kPerKernel) std::sort(keys.begin(), keys.end());
  std::string key = HashHex(device.Hash()) + "|" + std::string(ToString(mode)) + "|" +
                    std::string(ToString(policy)) + "|" + std::to_string(limit);
  // Printable ASCII (validated); records without a framework keep their keys.
  if (!framework.empty()) key += "|framework=" + std::string(framework);
  for (const std::string& k : keys) key += "|" + k;
  return key;
}

std::string CacheKey(const CacheRecord& record) {
  std::vector<Kernel> kernels;
  kernels.reserve(record.plan.kernels.size());
  for (const KernelPlan& k : record.plan.kernels) kernels.push_back(k.kernel);
  return CacheKey(record.device, record.plan.workspace_mode, record.plan.policy,
                  record.plan.workspace_budget_bytes, kernels, record.plan.framework);
}

std::string SerializeCache(const std::vector<CacheRecord>& records) {
  std::string payload;
  for (const CacheRecord& record : records) {
    const std::string bytes = ToProto(record.plan, record.device).SerializeAsString();
    PutLe(&payload, bytes.size(), 4);
    payload += bytes;
  }
  std::string out = Header();
  PutLe(&out, payload.size(), 8);
  PutLe(&out, Fnv1a64(payload), 8);
  out += payload;
  return out;
}

Result<std::vector<CacheRecord>> ParseCache(std::string_view bytes) {
  const size_t newline = bytes.find('\n');
  if (newline == std::string_view::npos || newline > 64 ||
      bytes.substr(0, kPlanCacheMagic.size() + 1) != std::string(kPlanCacheMagic) + " ") {
    return InvalidArgument("not a ucudnn plan cache (no '" + std::string(kPlanCacheMagic) +
                           "' header)");
  }
  const std::string_view version =
      bytes.substr(kPlanCacheMagic.size() + 1, newline - kPlanCacheMagic.size() - 1);
  int version_number = 0;
  const auto [version_end, version_error] =
      std::from_chars(version.data(), version.data() + version.size(), version_number);
  if (version_error != std::errc() || version_end != version.data() + version.size() ||
      version_number < kOldestReadablePlanCacheVersion || version_number > kPlanCacheVersion) {
    return InvalidArgument("plan cache version '" + std::string(version) +
                           "' is not supported (this build reads " +
                           std::to_string(kOldestReadablePlanCacheVersion) + " to " +
                           std::to_string(kPlanCacheVersion) + ")");
  }
  size_t offset = newline + 1;
  if (bytes.size() < offset + 16) return InvalidArgument("plan cache truncated in its header");
  const uint64_t payload_size = GetLe(bytes, offset, 8);
  const uint64_t checksum = GetLe(bytes, offset + 8, 8);
  offset += 16;
  if (payload_size > kMaxPayloadBytes || bytes.size() - offset != payload_size) {
    return InvalidArgument("plan cache size mismatch: header says " + std::to_string(payload_size) +
                           " bytes, file holds " + std::to_string(bytes.size() - offset) +
                           " (truncated?)");
  }
  const std::string_view payload = bytes.substr(offset);
  if (Fnv1a64(payload) != checksum) return InvalidArgument("plan cache checksum mismatch");

  std::vector<CacheRecord> records;
  size_t at = 0;
  while (at < payload.size()) {
    const std::string where = "record " + std::to_string(records.size());
    if (payload.size() - at < 4) return InvalidArgument(where + ": truncated size");
    const uint64_t size = GetLe(payload, at, 4);
    at += 4;
    if (size > kMaxRecordBytes || payload.size() - at < size) {
      return InvalidArgument(where + ": size " + std::to_string(size) + " out of bounds");
    }
    v1::Plan message;
    if (!message.ParseFromArray(payload.data() + at, static_cast<int>(size))) {
      return InvalidArgument(where + ": not a ucudnn.v1.Plan");
    }
    at += size;
    Result<DeviceFingerprint> device = FromProto(message.device());
    if (!device.ok()) return device.status().WithContext(where + ".device");
    Result<NetworkPlan> plan = FromProto(message);
    if (!plan.ok()) return plan.status().WithContext(where);
    for (const KernelPlan& kernel : plan->kernels) {
      if (kernel.status != KernelPlanStatus::kPlanned) {
        return InvalidArgument(where + ": holds a kernel that is not planned");
      }
    }
    // Planned under the old tie rule, or from grouped kernels' old timings: left for the server
    // to plan again.
    if (version_number < kTieRulePlanCacheVersion && FrameworkBenchmarks(plan->framework)) continue;
    if (version_number < kGroupedRetimedPlanCacheVersion && HoldsGroupedKernel(*plan)) continue;
    records.push_back(CacheRecord{std::move(*device), std::move(*plan)});
  }
  return records;
}

PlanCache PlanCache::Load(const std::string& path) {
  PlanCache cache;
  if (path.empty()) return cache;
  Result<std::string> bytes = ReadWholeFile(path);
  if (!bytes.ok()) {
    if (bytes.status().code() != StatusCode::kNotFound) {
      client::Log().warn("plan cache {} is unreadable; ignoring it", path);
    }
    return cache;
  }
  Result<std::vector<CacheRecord>> records = ParseCache(*bytes);
  if (!records.ok()) {
    client::Log().warn("ignoring corrupt plan cache {}: {}", path, records.status().message());
    return cache;
  }
  for (CacheRecord& record : *records) cache.Put(std::move(record));
  client::Log().debug("loaded {} plan cache records from {}", cache.size(), path);
  return cache;
}

std::optional<KernelPlan> PlanCache::FindKernel(const DeviceFingerprint& device, BatchPolicy policy,
                                                uint64_t limit, const Kernel& kernel,
                                                std::string_view framework) const {
  auto it = records_.find(
      CacheKey(device, WorkspaceMode::kPerKernel, policy, limit, {kernel}, framework));
  if (it == records_.end() || it->second.plan.kernels.size() != 1) return std::nullopt;
  return it->second.plan.kernels.front();
}

std::optional<NetworkPlan> PlanCache::FindNetwork(const DeviceFingerprint& device,
                                                  WorkspaceMode mode, BatchPolicy policy,
                                                  uint64_t budget,
                                                  const std::vector<Kernel>& kernels,
                                                  std::string_view framework) const {
  auto it = records_.find(CacheKey(device, mode, policy, budget, kernels, framework));
  if (it == records_.end()) return std::nullopt;
  return it->second.plan;
}

void PlanCache::Put(CacheRecord record) {
  std::string key = CacheKey(record);
  records_.insert_or_assign(std::move(key), std::move(record));
}

Status PlanCache::Save(const std::string& path) const {
  if (path.empty()) return InvalidArgument("cache path: empty");
  // What another process saved since we loaded stays, unless we have the same key.
  PlanCache merged = Load(path);
  for (const auto& [key, record] : records_) merged.records_.insert_or_assign(key, record);
  std::vector<CacheRecord> records;
  records.reserve(merged.records_.size());
  for (auto& [key, record] : merged.records_) records.push_back(std::move(record));
  return WriteFileAtomically(path, SerializeCache(records));
}

}  // namespace ucudnn::client
