#include "ucudnn/server/plan_key.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string_view>

#include "ucudnn/core/problem.h"
#include "ucudnn/proto/proto_convert.h"

namespace ucudnn::server {
namespace {

void AppendU64(std::string& out, uint64_t v) {
  char buffer[24];
  const int n = std::snprintf(buffer, sizeof(buffer), "%llx", static_cast<unsigned long long>(v));
  out.append(buffer, static_cast<size_t>(n));
}

void AppendI64(std::string& out, int64_t v) { out += std::to_string(v); }

}  // namespace

uint64_t TimingTableDigest(const TimingTable& table) {
  std::vector<const Timing*> entries;
  entries.reserve(table.entries.size());
  for (const auto& t : table.entries) entries.push_back(&t);
  std::sort(entries.begin(), entries.end(), [](const Timing* a, const Timing* b) {
    if (a->micro_batch != b->micro_batch) return a->micro_batch < b->micro_batch;
    if (a->algo != b->algo) return a->algo < b->algo;
    if (a->engine_config != b->engine_config) return a->engine_config < b->engine_config;
    return a->time_ms < b->time_ms;  // duplicates should not exist; keep the order total anyway
  });
  std::string text;
  text.reserve(entries.size() * 64);
  for (const Timing* t : entries) {
    AppendI64(text, t->micro_batch);
    text += ',';
    AppendI64(text, t->algo);
    text += ',';
    AppendU64(text, std::bit_cast<uint64_t>(t->time_ms));
    text += ',';
    AppendU64(text, std::bit_cast<uint64_t>(t->spread_ms));
    text += ',';
    AppendI64(text, t->samples);
    text += ',';
    AppendU64(text, t->workspace_bytes);
    text += ',';
    AppendI64(text, static_cast<int>(t->status));
    text += ',';
    AppendI64(text, static_cast<int64_t>(t->error.size()));
    text += ':';
    text += t->error;
    if (!t->engine_config.empty()) {
      text += ",engine=";
      text += t->engine_config;
    }
    text += ';';
  }
  return Fnv1a64(text);
}

std::string CanonicalPlanRequest(const PlanRequest& request) {
  std::string text;
  text.reserve(256 + request.kernels.size() * 200);
  text += "device=";
  text += request.device.Key();
  text += "\npolicy=";
  text += ToString(request.policy);
  text += "\nmode=";
  text += ToString(request.workspace_mode);
  text += "\nworkspace=";
  AppendU64(text, request.workspace_bytes);
  if (request.algorithms != AlgorithmSpace::kAll) {
    text += "\nalgorithms=";
    text += ToString(request.algorithms);
  }
  if (!request.framework.empty()) {
    // Printable ASCII without line breaks (validated), so the line stays unambiguous.
    text += "\nframework=";
    text += request.framework;
  }
  if (request.workspace_mode == WorkspaceMode::kTotalSum) {
    text += "\nilp_time_limit_ms=";
    AppendI64(text, std::llround(request.ilp_time_limit_s * 1000.0));
  }
  text += '\n';
  for (const auto& kernel : request.kernels) {
    text += CanonicalKey(kernel.problem);
    text += "|n=";
    AppendI64(text, kernel.mini_batch);
    text += "|name=";
    AppendI64(text, static_cast<int64_t>(kernel.name.size()));
    text += ':';
    text += kernel.name;
    if (kernel.workspace_limit) {
      // Only where set: a request without per-kernel limits keeps the key it always had.
      text += "|limit=";
      AppendU64(text, *kernel.workspace_limit);
    }
    text += '\n';
  }
  return text;
}

std::string PlanContentText(const PlanRequest& request,
                            const std::vector<std::optional<uint64_t>>& kernel_table_digests) {
  std::string text = "ucudnn-plan;revision=" + std::to_string(kPlannerRevision) + "\n";
  text += CanonicalPlanRequest(request);
  text += "timings:";
  for (const auto& digest : kernel_table_digests) {
    if (digest) {
      AppendU64(text, *digest);
    } else {
      text += '-';
    }
    text += ',';
  }
  return text;
}

uint64_t PlanContentHash(const PlanRequest& request,
                         const std::vector<std::optional<uint64_t>>& kernel_table_digests) {
  return Fnv1a64(PlanContentText(request, kernel_table_digests));
}

uint64_t PlanContentCheck(std::string_view content_text) {
  return std::hash<std::string_view>{}(content_text);
}

bool PlanAnswersRequest(const v1::Plan& plan, const PlanRequest& request) {
  if (plan.policy() != ToProto(request.policy) ||
      plan.workspace_mode() != ToProto(request.workspace_mode) ||
      plan.workspace_bytes() != request.workspace_bytes ||
      plan.kernels_size() != static_cast<int>(request.kernels.size()) ||
      plan.framework() != request.framework) {
    return false;
  }
  const auto device = FromProto(plan.device());
  if (!device.ok() || !(*device == request.device)) return false;
  for (int i = 0; i < plan.kernels_size(); ++i) {
    const auto kernel = FromProto(plan.kernels(i).kernel());
    if (!kernel.ok() || !(*kernel == request.kernels[static_cast<size_t>(i)])) return false;
  }
  return true;
}

}  // namespace ucudnn::server
