// Per-kernel planning (pure): the μ-cuDNN dynamic program and the time/workspace Pareto front.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Candidate micro-batch sizes for `policy` up to `mini_batch`, ascending. kUndivided: {B};
// kPowerOfTwo: 1, 2, 4, ... <= B, plus B itself; kAll: 1..B.
std::vector<int64_t> MicroBatchSizes(BatchPolicy policy, int64_t mini_batch);

// The DP, the undivided baseline and the front below never use the framework's own timings
// (kFrameworkAlgo): the framework is a candidate only as the whole kernel, through the functions
// at the end of this file.

// T(0) = 0, T(n) = min over allowed b <= n of t(b) + T(n - b), with t(b) the fastest kOk
// algorithm at micro-batch b whose workspace <= limit. Ties are broken deterministically
// (smaller workspace, then larger micro-batch, then lower algorithm id). kNotFound when no
// configuration fits, with the reason (no timings at all / nothing within the limit).
Result<KernelConfig> SolveKernelDp(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                                   uint64_t workspace_limit);

// T(n) of SolveKernelDp for every n in [0, mini_batch]: the fastest plan's time for n samples
// within the limit (infinity where the sizes cannot make n). Empty for an invalid mini-batch.
std::vector<double> KernelDpTimes(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                                  uint64_t workspace_limit);

// The fastest single kOk algorithm at the full mini-batch within the limit.
Result<Segment> FastestUndivided(const TimingTable& table, int64_t mini_batch,
                                 uint64_t workspace_limit);

// For every distinct workspace level of the table (up to `max_workspace`), the DP optimum at
// that level; dominated points (slower and no smaller) dropped. Sorted by workspace ascending,
// time strictly descending.
std::vector<KernelConfig> ParetoFront(const TimingTable& table, int64_t mini_batch,
                                      BatchPolicy policy, uint64_t max_workspace = UINT64_MAX);

// The framework's own convolution as a candidate (timing.h: kFrameworkAlgo, kFrameworkMargin).

// The kOk timing of framework `framework` at exactly `mini_batch` (the whole kernel), whatever
// its workspace; nullptr when `framework` is empty or there is none. Framework timings of other
// identities, and at other micro-batch sizes, are never candidates.
const Timing* FindFramework(const TimingTable& table, int64_t mini_batch,
                            std::string_view framework);

// That timing as the one segment of a kernel, when its workspace fits `workspace_limit`.
std::optional<Segment> FrameworkSegment(const TimingTable& table, int64_t mini_batch,
                                        std::string_view framework, uint64_t workspace_limit);

// Whether the framework of `identity` benchmarks its own convolution in every job at its first
// calls: its mode, the text after the identity's last '/', begins with "benchmark" (PyTorch's
// cudnn.benchmark: "torch-2.11.0+cu130/benchmark"). Its own convolution then costs each job that
// benchmark, and ucudnn's configuration (timed once for the cluster) does not: ties go to
// ucudnn. Any other identity's ties go to the framework, whose own path costs nothing more.
bool FrameworkBenchmarks(std::string_view identity);

// The time the planner weighs the framework's own convolution of `framework_ms` at: within
// kFrameworkMargin it is a tie, so framework_ms * (1 - kFrameworkMargin) where ties go to the
// framework, framework_ms / (1 - kFrameworkMargin) where they go to ucudnn (`benchmarks`).
inline double FrameworkPlanningMs(double framework_ms, bool benchmarks) {
  return benchmarks ? framework_ms / (1 - kFrameworkMargin) : framework_ms * (1 - kFrameworkMargin);
}

// Whether ucudnn's configuration of `ucudnn_ms` replaces the framework's of `framework_ms`:
// only when faster than FrameworkPlanningMs. Where ties go to ucudnn (`benchmarks`), the
// framework's own is kept only when faster than ucudnn_ms * (1 - kFrameworkMargin).
inline bool BeatsFramework(double ucudnn_ms, double framework_ms, bool benchmarks = false) {
  return ucudnn_ms < FrameworkPlanningMs(framework_ms, benchmarks);
}

// Where ties go to ucudnn, whether `config` may take the framework's place on a tie: it needs no
// more workspace than the framework's own, or it beats it outright (BeatsFramework with ties to
// the framework). A tie is not worth more of the job's memory.
inline bool WorthItsWorkspace(const KernelConfig& config, const Segment& framework) {
  return config.workspace_bytes <= framework.workspace_bytes ||
         BeatsFramework(config.time_ms, framework.time_ms);
}

// One kernel (per-kernel and shared workspace modes): ucudnn's configuration (absent when none
// fits) against the framework's segment; the framework unless BeatsFramework. Where ties go to
// ucudnn (`benchmarks`), a configuration that is not WorthItsWorkspace gives way to the DP's
// optimum of `table` within the framework's workspace. The chosen configuration reports its
// measured time.
KernelConfig ChooseAgainstFramework(const TimingTable& table, int64_t mini_batch,
                                    BatchPolicy policy, const std::optional<KernelConfig>& ucudnn,
                                    const Segment& framework, bool benchmarks);

// The sum-budget ILP's view: `front` (ParetoFront's order) with the framework's segment as one
// more point of its measured workspace and of time FrameworkPlanningMs, so that minimising the
// sum of times applies the margin; points it dominates are dropped, and where ties go to ucudnn
// (`benchmarks`) so are those that are not WorthItsWorkspace. A chosen point goes through
// ReportedConfig before it is reported.
void AddFrameworkPoint(const Segment& framework, std::vector<KernelConfig>* front,
                       bool benchmarks = false);
// `config` with its time the sum of its segments' measured times (undoes AddFrameworkPoint's
// scaling; any other configuration is returned as it is).
KernelConfig ReportedConfig(KernelConfig config);

}  // namespace ucudnn
