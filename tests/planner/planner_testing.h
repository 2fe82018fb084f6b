// Helpers of the planner tests: random timing tables, brute-force references, and an exact text
// form of plans for byte-for-byte comparisons.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/problems.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::testing_planner {

// A random table for micro-batch sizes 1..max_batch and `algos` algorithms. Workspaces come from
// a few levels so that ties and shared levels occur; some entries are missing, and some are
// unsupported or failed with a tempting time (the planner must never choose those).
inline TimingTable RandomTable(std::mt19937_64& rng, int64_t max_batch, int algos) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<int> level(0, 6);
  TimingTable table;
  for (int64_t b = 1; b <= max_batch; ++b) {
    for (int a = 0; a < algos; ++a) {
      const double draw = unit(rng);
      if (draw < 0.15) continue;  // not measured
      Timing t;
      t.micro_batch = b;
      t.algo = a;
      // Per-sample efficiency improves with b, with noise, so splitting is sometimes worth it.
      t.time_ms = 0.05 + static_cast<double>(b) * (0.2 + unit(rng)) / (1.0 + 0.1 * a);
      t.time_ms = std::round(t.time_ms * 1000.0) / 1000.0;  // coarse: equal times happen
      t.workspace_bytes = static_cast<uint64_t>(a == 0 ? 0 : level(rng) * 100 * b);
      if (draw < 0.22) {
        t.status = TimingStatus::kUnsupported;
        t.time_ms = 0.001;
      } else if (draw < 0.27) {
        t.status = TimingStatus::kFailed;
        t.time_ms = 0.0005;
        t.error = "CUDNN_STATUS_EXECUTION_FAILED";
      }
      table.entries.push_back(t);
    }
  }
  std::shuffle(table.entries.begin(), table.entries.end(), rng);
  return table;
}

using test_support::MakeTiming;

struct BruteConfig {
  double time_ms = 0;
  uint64_t workspace_bytes = 0;
};

// Every configuration (multiset of usable entries at allowed sizes summing to mini_batch) with
// workspace <= limit.
inline std::vector<BruteConfig> AllConfigs(const TimingTable& table, int64_t mini_batch,
                                           BatchPolicy policy, uint64_t limit) {
  const std::vector<int64_t> sizes = MicroBatchSizes(policy, mini_batch);
  std::vector<Timing> usable;
  for (const Timing& t : table.entries) {
    if (t.status != TimingStatus::kOk || t.workspace_bytes > limit) continue;
    if (std::find(sizes.begin(), sizes.end(), t.micro_batch) == sizes.end()) continue;
    usable.push_back(t);
  }
  std::vector<BruteConfig> out;
  std::function<void(size_t, int64_t, double, uint64_t)> walk = [&](size_t from, int64_t left,
                                                                    double time, uint64_t ws) {
    if (left == 0) {
      out.push_back({time, ws});
      return;
    }
    for (size_t i = from; i < usable.size(); ++i) {
      if (usable[i].micro_batch > left) continue;
      walk(i, left - usable[i].micro_batch, time + usable[i].time_ms,
           std::max(ws, usable[i].workspace_bytes));
    }
  };
  walk(0, mini_batch, 0.0, 0);
  return out;
}

inline double BruteBestTime(const std::vector<BruteConfig>& configs) {
  double best = std::numeric_limits<double>::infinity();
  for (const BruteConfig& c : configs) best = std::min(best, c.time_ms);
  return best;
}

// The documented DP tie rule's workspace: the smallest workspace among the configurations whose
// time equals the best (times that differ only by summation order count as equal).
inline uint64_t BruteTieWorkspace(const std::vector<BruteConfig>& configs) {
  const double best = BruteBestTime(configs);
  uint64_t workspace = std::numeric_limits<uint64_t>::max();
  for (const BruteConfig& c : configs) {
    if (c.time_ms <= best + 1e-9 * best) workspace = std::min(workspace, c.workspace_bytes);
  }
  return workspace;
}

// Checks that `config` is made of usable entries of `table` at allowed sizes within `limit`,
// sums to mini_batch, and carries consistent totals; returns an empty string or the problem.
inline std::string CheckConfig(const KernelConfig& config, const TimingTable& table,
                               int64_t mini_batch, BatchPolicy policy, uint64_t limit) {
  const std::vector<int64_t> sizes = MicroBatchSizes(policy, mini_batch);
  int64_t sum = 0;
  double time = 0;
  uint64_t ws = 0;
  for (const Segment& s : config.segments) {
    if (std::find(sizes.begin(), sizes.end(), s.micro_batch) == sizes.end()) {
      return "size not allowed: " + std::to_string(s.micro_batch);
    }
    const auto it = std::find_if(table.entries.begin(), table.entries.end(), [&](const Timing& t) {
      return t.micro_batch == s.micro_batch && t.algo == s.algo;
    });
    if (it == table.entries.end()) return "segment not in the table";
    if (it->status != TimingStatus::kOk) return "segment uses a non-ok timing";
    if (it->time_ms != s.time_ms || it->workspace_bytes != s.workspace_bytes) {
      return "segment time or workspace differs from the table";
    }
    if (s.workspace_bytes > limit) return "segment over the limit";
    sum += s.micro_batch;
    time += s.time_ms;
    ws = std::max(ws, s.workspace_bytes);
  }
  if (sum != mini_batch) return "sizes sum to " + std::to_string(sum);
  if (std::abs(time - config.time_ms) > 1e-9 * std::max(1.0, time)) return "time is not the sum";
  if (ws != config.workspace_bytes) return "workspace is not the largest segment's";
  return "";
}

inline std::string Hex(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%a", v);
  return buffer;
}

inline std::string SegmentText(const Segment& s) {
  return std::to_string(s.micro_batch) + "@" + std::to_string(s.algo) + ":" + Hex(s.time_ms) + ":" +
         std::to_string(s.workspace_bytes);
}

// Every field of a plan, doubles exactly; ilp.solve_seconds (a wall-clock time) left out.
inline std::string PlanText(const NetworkPlan& plan) {
  std::string out = std::to_string(static_cast<int>(plan.workspace_mode)) + " " +
                    std::to_string(static_cast<int>(plan.policy)) + " " +
                    std::to_string(plan.workspace_budget_bytes) + " " + Hex(plan.total_time_ms) +
                    " " + Hex(plan.total_undivided_ms) + " " +
                    std::to_string(plan.total_workspace_bytes) + " " +
                    std::to_string(plan.complete) + " " + Hex(plan.undivided_sum_ms) + "\n";
  out += "ilp " + std::to_string(plan.ilp.used) + " " + plan.ilp.status + " " +
         Hex(plan.ilp.objective_ms) + " " + Hex(plan.ilp.bound_ms) + " " + Hex(plan.ilp.gap) + " " +
         std::to_string(plan.ilp.variables) + " " + std::to_string(plan.ilp.constraints) + "\n";
  for (const KernelPlan& kp : plan.kernels) {
    out +=
        kp.kernel.name + " " + std::to_string(static_cast<int>(kp.status)) + " " + kp.reason + " |";
    for (const Segment& s : kp.config.segments) out += " " + SegmentText(s);
    out += " | " + Hex(kp.config.time_ms) + " " + std::to_string(kp.config.workspace_bytes);
    out += " | " + (kp.undivided ? SegmentText(*kp.undivided) : std::string("none")) + "\n";
  }
  return out;
}

}  // namespace ucudnn::testing_planner
