#include "ucudnn/core/size_rule.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "ucudnn/core/dp.h"

namespace ucudnn {
namespace {

// `total` as a largest-first sum of the sizes of `descending` (each used as often as it fits);
// empty where they cannot make it.
std::vector<int64_t> LargestFirstSum(int64_t total, const std::vector<int64_t>& descending) {
  std::vector<int64_t> parts;
  for (int64_t size : descending) {
    if (size <= 0) continue;
    if (size <= total) parts.push_back(size);
    total %= size;
  }
  return total == 0 ? parts : std::vector<int64_t>{};
}

// The fastest time per sample at `size` within `workspace_limit` (FastestUndivided: kOk, the
// framework's own aside); infinite where none.
double PerSampleWithin(const TimingTable& table, int64_t size, uint64_t workspace_limit) {
  const Result<Segment> fastest = FastestUndivided(table, size, workspace_limit);
  return fastest.ok() ? fastest->time_ms / static_cast<double>(size)
                      : std::numeric_limits<double>::infinity();
}

}  // namespace

bool SmallerSizesCanHelp(const TimingTable& table, int64_t size, uint64_t workspace_limit) {
  // Of equally fast configurations FastestUndivided takes the one with the least workspace.
  const Result<Segment> fastest = FastestUndivided(table, size, UINT64_MAX);
  return !fastest.ok() || fastest->workspace_bytes > workspace_limit;
}

namespace {

// SizesForLimit, and with `timed_so_far` its rounds (NextSizesForLimit): a size the rule reaches
// below the always-timed ones that is not among them is returned but not split (its own times
// decide that, once taken).
std::vector<int64_t> SizesOfRule(const TimingTable& table, const std::vector<int64_t>& sizes,
                                 int64_t mini_batch, uint64_t workspace_limit,
                                 const std::set<int64_t>* timed_so_far) {
  std::vector<int64_t> descending(sizes);
  std::sort(descending.begin(), descending.end(), std::greater<>());
  descending.erase(std::unique(descending.begin(), descending.end()), descending.end());
  const auto parts_below = [&](int64_t size) {
    std::vector<int64_t> smaller;
    for (int64_t s : descending) {
      if (s < size) smaller.push_back(s);
    }
    return LargestFirstSum(size, smaller);
  };
  struct Pending {
    int64_t size;
    int64_t parent;  // the size it is a part of; 0 for the mini-batch's own
  };
  std::vector<Pending> pending;
  if (std::find(descending.begin(), descending.end(), mini_batch) != descending.end()) {
    pending.push_back({mini_batch, 0});
  } else {
    for (int64_t part : LargestFirstSum(mini_batch, descending)) pending.push_back({part, 0});
  }
  std::set<int64_t, std::greater<>> timed;
  std::set<int64_t> split;  // the sizes whose parts are timed
  while (!pending.empty()) {
    const Pending next = pending.back();
    pending.pop_back();
    timed.insert(next.size);
    // A size reached as a part of several others is weighed against each.
    if (split.count(next.size) > 0) continue;
    // The mini-batch's first kSplitsAlwaysTimed splits are always timed: a size's runs may beat
    // it per sample even where its fastest configuration fits, and not only one split down
    // (H100 fp32 ResNet-50 at 256, 64 MiB: a 1x1 forward 0.33 ms at 64, 0.088 ms at 32). Below
    // those, only where the split before paid off or the workspace asks for it.
    const bool always = next.size * (int64_t{1} << (kSplitsAlwaysTimed - 1)) >= mini_batch;
    if (!always && timed_so_far != nullptr && timed_so_far->count(next.size) == 0) continue;
    const bool descend =
        always || SmallerSizesCanHelp(table, next.size, workspace_limit) ||
        (next.parent > 0 && PerSampleWithin(table, next.size, workspace_limit) <
                                PerSampleWithin(table, next.parent, workspace_limit));
    if (!descend) continue;
    split.insert(next.size);
    for (int64_t part : parts_below(next.size)) pending.push_back({part, next.size});
  }
  return {timed.begin(), timed.end()};
}

}  // namespace

std::vector<int64_t> SizesForLimit(const TimingTable& table, const std::vector<int64_t>& sizes,
                                   int64_t mini_batch, uint64_t workspace_limit) {
  return SizesOfRule(table, sizes, mini_batch, workspace_limit, nullptr);
}

std::vector<int64_t> NextSizesForLimit(const TimingTable& table, const std::vector<int64_t>& sizes,
                                       int64_t mini_batch, uint64_t workspace_limit) {
  std::set<int64_t> timed_so_far;
  // The framework's own time (a job's measurement of PyTorch's) is not a size timed here.
  for (const Timing& t : table.entries) {
    if (!IsFramework(t)) timed_so_far.insert(t.micro_batch);
  }
  std::vector<int64_t> next;
  for (int64_t size : SizesOfRule(table, sizes, mini_batch, workspace_limit, &timed_so_far)) {
    if (timed_so_far.count(size) == 0) next.push_back(size);
  }
  return next;
}

std::vector<bool> UsableEntries(const TimingTable& table, int64_t mini_batch, double margin) {
  const auto& entries = table.entries;
  std::vector<bool> usable(entries.size(), false);
  const auto candidate = [&](const Timing& t) {
    return t.status == TimingStatus::kOk && t.algo != kFrameworkAlgo && t.micro_batch >= 1 &&
           t.micro_batch <= mini_batch;
  };
  std::set<uint64_t> limits;
  for (const Timing& t : entries) {
    if (candidate(t)) limits.insert(t.workspace_bytes);
  }
  const size_t n_total = static_cast<size_t>(mini_batch);
  for (const uint64_t limit : limits) {
    // The DP's optimum for every count of samples, over the table's sizes.
    const std::vector<double> best = KernelDpTimes(table, mini_batch, BatchPolicy::kAll, limit);
    if (best.empty() || !std::isfinite(best[n_total])) continue;
    for (size_t i = 0; i < entries.size(); ++i) {
      const Timing& t = entries[i];
      if (usable[i] || !candidate(t) || t.workspace_bytes > limit) continue;
      usable[i] = t.time_ms / (1 + margin) + best[n_total - static_cast<size_t>(t.micro_batch)] <=
                  best[n_total];
    }
  }
  return usable;
}

}  // namespace ucudnn
