// The μ-cuDNN per-kernel dynamic program and the time/workspace Pareto front (dp.h), and the names
// of the plan and timing enums (plan.h, timing.h; the problem's enums have theirs in problem.cc).
// Canonical names are what keys, files, the database and the API hold; the "choice" parsers also
// read what a person types (any case, '-' for '_', aliases).
#include "ucudnn/core/dp.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "ucudnn/core/enum_names.h"
#include "ucudnn/core/text.h"
#include "ucudnn/core/units.h"

namespace ucudnn {

namespace {

constexpr NameTable<BatchPolicy, 3> kBatchPolicyNames{{
    {"undivided", BatchPolicy::kUndivided},
    {"power_of_two", BatchPolicy::kPowerOfTwo},
    {"all", BatchPolicy::kAll},
}};
constexpr NameTable<BatchPolicy, 1> kBatchPolicyAliases{{{"pow2", BatchPolicy::kPowerOfTwo}}};
constexpr NameTable<WorkspaceMode, 3> kWorkspaceModeNames{{
    {"per_kernel", WorkspaceMode::kPerKernel},
    {"total_sum", WorkspaceMode::kTotalSum},
    {"total_shared", WorkspaceMode::kTotalShared},
}};
// A total budget means the sequential model unless the sum model is named (plan.h says why).
constexpr NameTable<WorkspaceMode, 2> kWorkspaceModeAliases{{
    {"total", WorkspaceMode::kTotalShared},
    {"shared", WorkspaceMode::kTotalShared},
}};
constexpr NameTable<AlgorithmSpace, 3> kAlgorithmSpaceNames{{
    {"all", AlgorithmSpace::kAll},
    {"legacy", AlgorithmSpace::kLegacy},
    {"engines", AlgorithmSpace::kEngines},
}};
constexpr NameTable<AlgorithmSpace, 0> kNoAlgorithmSpaceAliases{};

constexpr NameTable<TimingStatus, 3> kTimingStatusNames{{
    {"ok", TimingStatus::kOk},
    {"unsupported", TimingStatus::kUnsupported},
    {"failed", TimingStatus::kFailed},
}};

// ParseName, but any case of a name is accepted.
template <typename Enum, size_t N>
Result<Enum> ParseNameIgnoringCase(std::string_view what, std::string_view text,
                                   const NameTable<Enum, N>& names) {
  if (std::optional<Enum> value = ValueNamed(Lowercase(text), names)) return *value;
  return ParseName(what, text, names);
}

// A canonical name or an alias, as a person types it; the error names `what` and lists
// `expected`.
template <typename Enum, size_t N, size_t M>
Result<Enum> ParseChoice(std::string_view what, std::string_view text,
                         const NameTable<Enum, N>& names, const NameTable<Enum, M>& aliases,
                         std::string_view expected) {
  const std::string choice = NormalizeChoice(text);
  if (std::optional<Enum> value = ValueNamed(choice, names)) return *value;
  if (std::optional<Enum> value = ValueNamed(choice, aliases)) return *value;
  return InvalidArgument(std::string(what) + ": expected " + std::string(expected) + ", got '" +
                         std::string(text) + "'");
}

}  // namespace

std::string NormalizeChoice(std::string_view text) {
  std::string choice = Lowercase(Trim(text));
  std::replace(choice.begin(), choice.end(), '-', '_');
  return choice;
}

std::string_view ToString(BatchPolicy p) { return NameOf(p, kBatchPolicyNames); }
std::string_view ToString(WorkspaceMode m) { return NameOf(m, kWorkspaceModeNames); }
std::string_view ToString(AlgorithmSpace a) { return NameOf(a, kAlgorithmSpaceNames); }
std::string_view ToString(TimingStatus s) { return NameOf(s, kTimingStatusNames); }

Result<BatchPolicy> ParseBatchPolicy(std::string_view s) {
  return ParseNameIgnoringCase("policy", s, kBatchPolicyNames);
}
Result<BatchPolicy> ParseBatchPolicyChoice(std::string_view what, std::string_view s) {
  return ParseChoice(what, s, kBatchPolicyNames, kBatchPolicyAliases,
                     ListNames(kBatchPolicyNames, " or "));
}

Result<WorkspaceMode> ParseWorkspaceMode(std::string_view s) {
  return ParseNameIgnoringCase("workspace_mode", s, kWorkspaceModeNames);
}
Result<WorkspaceMode> ParseWorkspaceModeChoice(std::string_view what, std::string_view s) {
  return ParseChoice(what, s, kWorkspaceModeNames, kWorkspaceModeAliases,
                     "per_kernel, total (= total_shared), total_shared or total_sum");
}

Result<AlgorithmSpace> ParseAlgorithmSpace(std::string_view s) {
  return ParseNameIgnoringCase("algorithms", s, kAlgorithmSpaceNames);
}
Result<AlgorithmSpace> ParseAlgorithmSpaceChoice(std::string_view what, std::string_view s) {
  return ParseChoice(what, s, kAlgorithmSpaceNames, kNoAlgorithmSpaceAliases,
                     ListNames(kAlgorithmSpaceNames, " or "));
}

Result<TimingStatus> ParseTimingStatus(std::string_view s) {
  return ParseNameIgnoringCase("status", s, kTimingStatusNames);
}

std::vector<int64_t> MicroBatchSizes(BatchPolicy policy, int64_t mini_batch) {
  std::vector<int64_t> sizes;
  if (mini_batch < 1) return sizes;
  switch (policy) {
    case BatchPolicy::kUndivided:
      sizes.push_back(mini_batch);
      break;
    case BatchPolicy::kPowerOfTwo:
      for (int64_t b = 1; b <= mini_batch; b *= 2) sizes.push_back(b);
      if (sizes.back() != mini_batch) sizes.push_back(mini_batch);
      break;
    case BatchPolicy::kAll:
      sizes.reserve(static_cast<size_t>(mini_batch));
      for (int64_t b = 1; b <= mini_batch; ++b) sizes.push_back(b);
      break;
  }
  return sizes;
}

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Times that differ only by the order of a floating-point sum are equal: ties then fall to the
// documented tie-breakers instead of to rounding noise.
constexpr double kRelativeTie = 1e-12;
bool ClearlyLess(double a, double b) {
  return b == kInfinity ? a < b : a < b - kRelativeTie * std::fabs(b);
}

// A measurement with a sane time.
bool Measured(const Timing& t) {
  return t.status == TimingStatus::kOk && std::isfinite(t.time_ms) && t.time_ms >= 0;
}

// A measurement the DP may choose: measured fine, and one of ucudnn's own (the framework's are
// candidates only as the whole kernel).
bool Usable(const Timing& t) { return Measured(t) && !IsFramework(t); }

// The algorithm chosen for one micro-batch size: t(b) of the DP.
struct Best {
  bool present = false;
  int algo = 0;
  std::string engine_config;  // empty for a legacy algorithm
  double time_ms = kInfinity;
  uint64_t workspace_bytes = 0;
};

// Faster wins; on equal time the smaller workspace, then the lower algorithm (AlgorithmLess:
// legacy algorithms by id, then engine configurations by key).
bool Improves(const Timing& t, const Best& best) {
  if (!best.present) return true;
  if (t.time_ms != best.time_ms) return t.time_ms < best.time_ms;
  if (t.workspace_bytes != best.workspace_bytes) return t.workspace_bytes < best.workspace_bytes;
  return AlgorithmLess(AlgorithmOf(t), Algorithm(best.algo, best.engine_config));
}

void Take(const Timing& t, Best* best) {
  best->present = true;
  best->algo = t.algo;
  best->engine_config = t.engine_config;
  best->time_ms = t.time_ms;
  best->workspace_bytes = t.workspace_bytes;
}

// allowed[b] for b in [0, mini_batch].
std::vector<char> AllowedMask(BatchPolicy policy, int64_t mini_batch) {
  std::vector<char> allowed(static_cast<size_t>(mini_batch) + 1, 0);
  for (int64_t b : MicroBatchSizes(policy, mini_batch)) allowed[static_cast<size_t>(b)] = 1;
  return allowed;
}

Status ValidateMiniBatch(int64_t mini_batch) {
  if (mini_batch < 1 || mini_batch > kMaxBatch) {
    return InvalidArgument("mini_batch: must be in [1, " + std::to_string(kMaxBatch) + "], got " +
                           std::to_string(mini_batch));
  }
  return Status::Ok();
}

// Walks the DP's first-segment choices from n = mini_batch down to 0 and returns the
// configuration in canonical order (larger micro-batches first, then lower algorithm id).
KernelConfig Reconstruct(int64_t mini_batch, const std::vector<int64_t>& first,
                         const std::vector<Best>& best) {
  KernelConfig config;
  for (int64_t n = mini_batch; n > 0;) {
    const int64_t b = first[static_cast<size_t>(n)];
    const Best& choice = best[static_cast<size_t>(b)];
    config.segments.push_back(
        Segment{b, choice.algo, choice.time_ms, choice.workspace_bytes, choice.engine_config});
    n -= b;
  }
  std::sort(config.segments.begin(), config.segments.end(), [](const Segment& a, const Segment& b) {
    if (a.micro_batch != b.micro_batch) return a.micro_batch > b.micro_batch;
    return AlgorithmLess(AlgorithmOf(a), AlgorithmOf(b));
  });
  for (const Segment& s : config.segments) {
    config.time_ms += s.time_ms;
    config.workspace_bytes = std::max(config.workspace_bytes, s.workspace_bytes);
  }
  return config;
}

std::string JoinSizes(const std::vector<int64_t>& sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) out += ", ";
    if (i == 8 && sizes.size() > 10) {
      out += "... " + std::to_string(sizes.back());
      break;
    }
    out += std::to_string(sizes[i]);
  }
  return out;
}

// Why no configuration exists, in words a user can act on.
Status ExplainInfeasible(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                         uint64_t workspace_limit, const std::vector<char>& allowed,
                         const std::vector<Best>& best) {
  if (table.entries.empty()) return NotFound("no timings for this problem");
  int ok = 0, unsupported = 0, failed = 0;
  const Timing* smallest = nullptr;  // the usable allowed entry needing the least workspace
  for (const Timing& t : table.entries) {
    if (t.status == TimingStatus::kUnsupported) ++unsupported;
    if (t.status == TimingStatus::kFailed) ++failed;
    if (!Usable(t)) continue;
    ++ok;
    if (t.micro_batch < 1 || t.micro_batch > mini_batch) continue;
    if (!allowed[static_cast<size_t>(t.micro_batch)]) continue;
    if (smallest == nullptr || t.workspace_bytes < smallest->workspace_bytes) smallest = &t;
  }
  if (ok == 0) {
    return NotFound("no successful timing (" + std::to_string(unsupported) + " unsupported, " +
                    std::to_string(failed) + " failed)");
  }
  if (smallest == nullptr) {
    return NotFound("no successful timing at a micro-batch size that policy " +
                    std::string(ToString(policy)) + " allows up to mini-batch " +
                    std::to_string(mini_batch));
  }
  if (smallest->workspace_bytes > workspace_limit) {
    return NotFound("nothing fits the workspace limit of " + FormatBytes(workspace_limit) +
                    ": the smallest workspace measured is " +
                    FormatBytes(smallest->workspace_bytes) + " (micro-batch " +
                    std::to_string(smallest->micro_batch) + ", algo " +
                    AlgorithmText(AlgorithmOf(*smallest)) + ")");
  }
  std::vector<int64_t> fitting;
  for (int64_t b = 1; b <= mini_batch; ++b) {
    if (best[static_cast<size_t>(b)].present) fitting.push_back(b);
  }
  return NotFound("the micro-batch sizes with a timing within the workspace limit of " +
                  FormatBytes(workspace_limit) + " (" + JoinSizes(fitting) +
                  ") cannot sum to mini-batch " + std::to_string(mini_batch));
}

struct Candidate {
  int64_t b;
  double time_ms;
  uint64_t workspace_bytes;
};

// The DP over few candidate sizes (policy power_of_two, or few sizes that fit): one pass per n,
// ClearlyLess folded into two thresholds that change only when the best candidate does.
void SparseDp(const std::vector<Candidate>& candidates, int64_t mini_batch,
              std::vector<double>* time, std::vector<uint64_t>* workspace,
              std::vector<int64_t>* first) {
  for (int64_t n = 1; n <= mini_batch; ++n) {
    double best_time = kInfinity;
    double faster_below = kInfinity;  // t < faster_below: ClearlyLess(t, best_time)
    double tie_up_to = -1;            // t <= tie_up_to: !ClearlyLess(best_time, t), a tie
    uint64_t best_workspace = 0;
    int64_t best_first = 0;
    for (const Candidate& c : candidates) {
      if (c.b > n) break;
      const size_t rest = static_cast<size_t>(n - c.b);
      const double t = c.time_ms + (*time)[rest];
      if (t < faster_below) {
        best_workspace = std::max(c.workspace_bytes, (*workspace)[rest]);
      } else if (t <= tie_up_to) {
        const uint64_t w = std::max(c.workspace_bytes, (*workspace)[rest]);
        // Ascending b: `<=` on a full tie prefers the larger micro-batch.
        if (w > best_workspace) continue;
        best_workspace = w;
      } else {
        continue;
      }
      best_time = t;
      best_first = c.b;
      faster_below = t - kRelativeTie * t;
      tie_up_to = t / (1 - kRelativeTie);
    }
    (*time)[static_cast<size_t>(n)] = best_time;
    (*workspace)[static_cast<size_t>(n)] = best_workspace;
    (*first)[static_cast<size_t>(n)] = best_first;
  }
}

// Two doubles (SSE2, the x86-64 baseline; other targets split or join them as they can), and
// the same at any double's address: unaligned, and allowed to alias doubles (as the compilers'
// own intrinsics headers declare their unaligned vector types).
typedef double Double2 __attribute__((vector_size(16)));
typedef double Double2Unaligned __attribute__((vector_size(16), aligned(8), may_alias));

Double2 Load2(const double* p) { return *reinterpret_cast<const Double2Unaligned*>(p); }
void Store2(double* p, Double2 v) { *reinterpret_cast<Double2Unaligned*>(p) = v; }

// The same DP over many candidate sizes (policy all), in two passes per n over plain arrays:
// t(b) for every b (infinite where none fits) against T(n - b) read from a reversed copy, so
// that both run forward. The first pass stores the sums t(b) + T(n - b) and takes their minimum,
// eight at a time in four independent pairs and without branches; the second finds the few
// sums within the minimum's tie tolerance, eight at a time, and resolves those ties by the
// smaller workspace, then the larger b. The same rule as SparseDp, with ties measured against
// the minimum instead of the best so far.
void DenseDp(const std::vector<Candidate>& candidates, int64_t mini_batch,
             std::vector<double>* time, std::vector<uint64_t>* workspace,
             std::vector<int64_t>* first) {
  constexpr size_t kBlock = 8;
  const size_t batch = static_cast<size_t>(mini_batch);
  // Padded with infinite times so that the last block of every n reads defined values.
  std::vector<double> segment_time(batch + 1 + kBlock, kInfinity);  // [b]
  std::vector<uint64_t> segment_workspace(batch + 1, 0);
  for (const Candidate& c : candidates) {
    segment_time[static_cast<size_t>(c.b)] = c.time_ms;
    segment_workspace[static_cast<size_t>(c.b)] = c.workspace_bytes;
  }
  // reversed_*[batch - k] = T(k), W(k), then the padding.
  std::vector<double> reversed_time(batch + 1 + kBlock, kInfinity);
  std::vector<uint64_t> reversed_workspace(batch + 1, 0);
  reversed_time[batch] = 0;
  std::vector<double> sums(batch + kBlock);
  for (size_t n = 1; n <= batch; ++n) {
    // b = 1 + i for i in [0, n): t(b) = a[i], T(n - b) = r[i]; whole blocks past n are infinite.
    const double* a = segment_time.data() + 1;
    const double* r = reversed_time.data() + (batch - n + 1);
    const size_t end = (n + kBlock - 1) / kBlock * kBlock;
    Double2 m0 = {kInfinity, kInfinity}, m1 = m0, m2 = m0, m3 = m0;
    for (size_t i = 0; i < end; i += kBlock) {
      const Double2 s0 = Load2(a + i) + Load2(r + i);
      const Double2 s1 = Load2(a + i + 2) + Load2(r + i + 2);
      const Double2 s2 = Load2(a + i + 4) + Load2(r + i + 4);
      const Double2 s3 = Load2(a + i + 6) + Load2(r + i + 6);
      Store2(sums.data() + i, s0);
      Store2(sums.data() + i + 2, s1);
      Store2(sums.data() + i + 4, s2);
      Store2(sums.data() + i + 6, s3);
      m0 = s0 < m0 ? s0 : m0;
      m1 = s1 < m1 ? s1 : m1;
      m2 = s2 < m2 ? s2 : m2;
      m3 = s3 < m3 ? s3 : m3;
    }
    m0 = m1 < m0 ? m1 : m0;
    m2 = m3 < m2 ? m3 : m2;
    m0 = m2 < m0 ? m2 : m0;
    const double minimum = std::min(m0[0], m0[1]);
    if (minimum == kInfinity) continue;  // T(n) stays infinite
    const double tie_up_to = minimum / (1 - kRelativeTie);
    const Double2 tie = {tie_up_to, tie_up_to};
    const uint64_t* aw = segment_workspace.data() + 1;
    const uint64_t* rw = reversed_workspace.data() + (batch - n + 1);
    double best_time = kInfinity;
    uint64_t best_workspace = 0;
    size_t best_first = 0;
    for (size_t i = 0; i < end; i += kBlock) {
      const auto within = (Load2(sums.data() + i) <= tie) | (Load2(sums.data() + i + 2) <= tie) |
                          (Load2(sums.data() + i + 4) <= tie) | (Load2(sums.data() + i + 6) <= tie);
      if ((within[0] | within[1]) == 0) continue;
      for (size_t j = i; j < i + kBlock && j < n; ++j) {
        const double t = sums[j];
        if (t > tie_up_to) continue;
        const uint64_t w = std::max(aw[j], rw[j]);
        // Ascending b: `<=` on a full tie prefers the larger micro-batch.
        if (best_first != 0 && w > best_workspace) continue;
        best_time = t;
        best_workspace = w;
        best_first = j + 1;
      }
    }
    (*time)[n] = best_time;
    (*workspace)[n] = best_workspace;
    (*first)[n] = static_cast<int64_t>(best_first);
    reversed_time[batch - n] = best_time;
    reversed_workspace[batch - n] = best_workspace;
  }
}

// t(b) and T(n) of the DP (SolveKernelDp) for `mini_batch` samples within `workspace_limit`, the
// sizes `allowed`.
struct DpTables {
  std::vector<Best> best;           // t(b)
  std::vector<double> time;         // T(n)
  std::vector<uint64_t> workspace;  // T(n)'s largest segment workspace
  std::vector<int64_t> first;       // T(n)'s first segment
};
DpTables SolveDpTables(const TimingTable& table, int64_t mini_batch,
                       const std::vector<char>& allowed, uint64_t workspace_limit) {
  const size_t size = static_cast<size_t>(mini_batch) + 1;
  DpTables dp;
  // t(b): one pass over the table.
  dp.best.resize(size);
  for (const Timing& t : table.entries) {
    if (!Usable(t) || t.micro_batch < 1 || t.micro_batch > mini_batch) continue;
    const size_t b = static_cast<size_t>(t.micro_batch);
    if (!allowed[b] || t.workspace_bytes > workspace_limit) continue;
    if (Improves(t, dp.best[b])) Take(t, &dp.best[b]);
  }
  std::vector<Candidate> candidates;  // sizes with a t(b), ascending
  for (int64_t b = 1; b <= mini_batch; ++b) {
    const Best& seg = dp.best[static_cast<size_t>(b)];
    if (seg.present) candidates.push_back({b, seg.time_ms, seg.workspace_bytes});
  }

  // T(n) with its workspace (largest segment) as the tie-breaker, then the larger first segment.
  // The inner loop is the hot spot (O(B^2) for policy all).
  dp.time.assign(size, kInfinity);
  dp.workspace.assign(size, 0);
  dp.first.assign(size, 0);
  dp.time[0] = 0;
  if (candidates.size() * 4 >= static_cast<size_t>(mini_batch)) {
    DenseDp(candidates, mini_batch, &dp.time, &dp.workspace, &dp.first);
  } else {
    SparseDp(candidates, mini_batch, &dp.time, &dp.workspace, &dp.first);
  }
  return dp;
}

}  // namespace

Result<KernelConfig> SolveKernelDp(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                                   uint64_t workspace_limit) {
  UCUDNN_RETURN_IF_ERROR(ValidateMiniBatch(mini_batch));
  const std::vector<char> allowed = AllowedMask(policy, mini_batch);
  const DpTables dp = SolveDpTables(table, mini_batch, allowed, workspace_limit);
  if (dp.time[static_cast<size_t>(mini_batch)] == kInfinity) {
    return ExplainInfeasible(table, mini_batch, policy, workspace_limit, allowed, dp.best);
  }
  return Reconstruct(mini_batch, dp.first, dp.best);
}

std::vector<double> KernelDpTimes(const TimingTable& table, int64_t mini_batch, BatchPolicy policy,
                                  uint64_t workspace_limit) {
  if (!ValidateMiniBatch(mini_batch).ok()) return {};
  return SolveDpTables(table, mini_batch, AllowedMask(policy, mini_batch), workspace_limit).time;
}

Result<Segment> FastestUndivided(const TimingTable& table, int64_t mini_batch,
                                 uint64_t workspace_limit) {
  UCUDNN_RETURN_IF_ERROR(ValidateMiniBatch(mini_batch));
  Best best;
  for (const Timing& t : table.entries) {
    if (!Usable(t) || t.micro_batch != mini_batch || t.workspace_bytes > workspace_limit) continue;
    if (Improves(t, best)) Take(t, &best);
  }
  if (!best.present) {
    std::vector<char> allowed = AllowedMask(BatchPolicy::kUndivided, mini_batch);
    std::vector<Best> none(static_cast<size_t>(mini_batch) + 1);
    return ExplainInfeasible(table, mini_batch, BatchPolicy::kUndivided, workspace_limit, allowed,
                             none);
  }
  return Segment{mini_batch, best.algo, best.time_ms, best.workspace_bytes, best.engine_config};
}

// Workspace levels in increasing order. At each level only the sizes whose t(b) improved can
// change T, and a config using such a size b can be reordered to run b first, so the update
//   T(n) <- min(T(n), t(b) + T(n - b)) for n = b .. B (ascending)
// turns the previous level's optimum into this level's in O(B) per improved size, instead of a
// full O(B * |sizes|) DP per level. The front gets a point whenever T(B) strictly decreases.
std::vector<KernelConfig> ParetoFront(const TimingTable& table, int64_t mini_batch,
                                      BatchPolicy policy, uint64_t max_workspace) {
  std::vector<KernelConfig> front;
  if (!ValidateMiniBatch(mini_batch).ok()) return front;
  const std::vector<char> allowed = AllowedMask(policy, mini_batch);
  const size_t size = static_cast<size_t>(mini_batch) + 1;

  std::vector<const Timing*> entries;
  for (const Timing& t : table.entries) {
    if (!Usable(t) || t.micro_batch < 1 || t.micro_batch > mini_batch) continue;
    if (!allowed[static_cast<size_t>(t.micro_batch)] || t.workspace_bytes > max_workspace) continue;
    entries.push_back(&t);
  }
  std::sort(entries.begin(), entries.end(), [](const Timing* a, const Timing* b) {
    if (a->workspace_bytes != b->workspace_bytes) return a->workspace_bytes < b->workspace_bytes;
    if (a->time_ms != b->time_ms) return a->time_ms < b->time_ms;
    if (a->algo != b->algo || a->engine_config != b->engine_config) {
      return AlgorithmLess(AlgorithmOf(*a), AlgorithmOf(*b));
    }
    return a->micro_batch < b->micro_batch;
  });

  std::vector<Best> best(size);
  std::vector<double> time(size, kInfinity);
  std::vector<int64_t> first(size, 0);
  time[0] = 0;
  double last_time = kInfinity;
  std::vector<int64_t> improved;
  for (size_t i = 0; i < entries.size();) {
    const uint64_t level = entries[i]->workspace_bytes;
    improved.clear();
    for (; i < entries.size() && entries[i]->workspace_bytes == level; ++i) {
      const Timing& t = *entries[i];
      Best& slot = best[static_cast<size_t>(t.micro_batch)];
      // Entries come by increasing workspace: an equal time at a larger level is no gain.
      if (slot.present && t.time_ms >= slot.time_ms) continue;
      Take(t, &slot);
      improved.push_back(t.micro_batch);
    }
    if (improved.empty()) continue;
    std::sort(improved.begin(), improved.end());
    improved.erase(std::unique(improved.begin(), improved.end()), improved.end());
    for (int64_t b : improved) {
      const double tb = best[static_cast<size_t>(b)].time_ms;
      for (int64_t n = b; n <= mini_batch; ++n) {
        const double candidate = tb + time[static_cast<size_t>(n - b)];
        if (candidate < time[static_cast<size_t>(n)]) {
          time[static_cast<size_t>(n)] = candidate;
          first[static_cast<size_t>(n)] = b;
        }
      }
    }
    const double total = time[static_cast<size_t>(mini_batch)];
    if (!ClearlyLess(total, last_time)) continue;
    last_time = total;
    KernelConfig config = Reconstruct(mini_batch, first, best);
    // Summation order can move the time by an ulp: keep the front strictly monotone.
    if (!front.empty() && !ClearlyLess(config.time_ms, front.back().time_ms)) continue;
    while (!front.empty() && front.back().workspace_bytes >= config.workspace_bytes) {
      front.pop_back();  // slower and no smaller: dominated
    }
    front.push_back(std::move(config));
  }
  return front;
}

const Timing* FindFramework(const TimingTable& table, int64_t mini_batch,
                            std::string_view framework) {
  if (framework.empty()) return nullptr;
  for (const Timing& t : table.entries) {
    if (IsFramework(t) && Measured(t) && t.micro_batch == mini_batch &&
        t.engine_config == framework) {
      return &t;
    }
  }
  return nullptr;
}

std::optional<Segment> FrameworkSegment(const TimingTable& table, int64_t mini_batch,
                                        std::string_view framework, uint64_t workspace_limit) {
  const Timing* t = FindFramework(table, mini_batch, framework);
  if (t == nullptr || t->workspace_bytes > workspace_limit) return std::nullopt;
  return Segment{mini_batch, kFrameworkAlgo, t->time_ms, t->workspace_bytes, t->engine_config};
}

namespace {

KernelConfig OneSegment(const Segment& segment, double time_ms) {
  KernelConfig config;
  config.segments = {segment};
  config.time_ms = time_ms;
  config.workspace_bytes = segment.workspace_bytes;
  return config;
}

}  // namespace

bool FrameworkBenchmarks(std::string_view identity) {
  const size_t slash = identity.rfind('/');
  const std::string_view mode =
      slash == std::string_view::npos ? std::string_view{} : identity.substr(slash + 1);
  return mode.starts_with("benchmark");
}

KernelConfig ChooseAgainstFramework(const TimingTable& table, int64_t mini_batch,
                                    BatchPolicy policy, const std::optional<KernelConfig>& ucudnn,
                                    const Segment& framework, bool benchmarks) {
  std::optional<KernelConfig> candidate = ucudnn;
  if (benchmarks && candidate && !WorthItsWorkspace(*candidate, framework)) {
    Result<KernelConfig> within =
        SolveKernelDp(table, mini_batch, policy, framework.workspace_bytes);
    candidate = within.ok() ? std::optional<KernelConfig>(std::move(within).value()) : std::nullopt;
  }
  if (candidate && BeatsFramework(candidate->time_ms, framework.time_ms, benchmarks)) {
    return *candidate;
  }
  return OneSegment(framework, framework.time_ms);
}

void AddFrameworkPoint(const Segment& framework, std::vector<KernelConfig>* front,
                       bool benchmarks) {
  const double planning_ms = FrameworkPlanningMs(framework.time_ms, benchmarks);
  const uint64_t workspace = framework.workspace_bytes;
  if (benchmarks) {
    std::erase_if(*front,
                  [&](const KernelConfig& point) { return !WorthItsWorkspace(point, framework); });
  }
  // A ucudnn point within the workspace that beats the framework by the margin dominates it.
  for (const KernelConfig& point : *front) {
    if (point.workspace_bytes <= workspace && point.time_ms < planning_ms) return;
  }
  std::erase_if(*front, [&](const KernelConfig& point) {
    return point.workspace_bytes >= workspace && point.time_ms >= planning_ms;
  });
  const auto at = std::find_if(front->begin(), front->end(), [&](const KernelConfig& point) {
    return point.workspace_bytes > workspace;
  });
  front->insert(at, OneSegment(framework, planning_ms));
}

KernelConfig ReportedConfig(KernelConfig config) {
  if (config.segments.size() == 1 && IsFramework(config.segments[0])) {
    config.time_ms = config.segments[0].time_ms;
  }
  return config;
}

}  // namespace ucudnn
