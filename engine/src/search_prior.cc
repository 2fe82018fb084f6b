#include "ucudnn/engine/search_prior.h"

#include <algorithm>
#include <limits>
#include <set>

namespace ucudnn {
namespace {

bool WithinFactorTwo(int64_t a, int64_t b) {
  return a > 0 && b > 0 && std::max(a, b) <= 2 * std::min(a, b);
}

bool Usable(const Timing& t) { return t.status == TimingStatus::kOk && t.time_ms > 0; }

}  // namespace

bool Nearby(const ConvProblem& p, const ConvProblem& o) {
  return !(p == o) && p.op == o.op && p.data_type == o.data_type &&
         p.compute_type == o.compute_type && p.layout == o.layout && p.math == o.math &&
         p.r == o.r && p.s == o.s && p.pad_h == o.pad_h && p.pad_w == o.pad_w &&
         p.stride_h == o.stride_h && p.stride_w == o.stride_w && p.dilation_h == o.dilation_h &&
         p.dilation_w == o.dilation_w && p.groups == o.groups && p.t == o.t && p.pad_d == o.pad_d &&
         p.stride_d == o.stride_d && p.dilation_d == o.dilation_d && p.is_3d() == o.is_3d() &&
         WithinFactorTwo(p.c, o.c) && WithinFactorTwo(p.k, o.k);
}

std::map<std::string, std::string> PriorLosers(const ConvProblem& problem,
                                               const std::vector<KnownTable>& known) {
  // Per configuration: nearby tables where it lost at every large size measured, and whether
  // any nearby table saw it not lose.
  std::map<std::string, int> lost_everywhere;
  std::set<std::string> kept;
  for (const KnownTable& k : known) {
    if (!Nearby(problem, k.problem)) continue;
    std::map<std::string, bool> lost_here;  // configuration -> lost at every large size so far
    for (const Timing& t : k.table.entries) {
      if (t.micro_batch < kPriorFromMicroBatch || !Usable(t)) continue;
      double best = std::numeric_limits<double>::infinity();
      for (const Timing& other : k.table.entries) {
        if (other.micro_batch == t.micro_batch && Usable(other) &&
            other.workspace_bytes <= t.workspace_bytes) {
          best = std::min(best, other.time_ms);
        }
      }
      const std::string id = AlgorithmText(AlgorithmOf(t));
      const bool lost = t.time_ms > kPriorLossFactor * best;
      auto [it, inserted] = lost_here.emplace(id, lost);
      if (!inserted) it->second = it->second && lost;
    }
    for (const auto& [id, lost] : lost_here) {
      if (lost) {
        ++lost_everywhere[id];
      } else {
        kept.insert(id);
      }
    }
  }
  std::map<std::string, std::string> losers;
  for (const auto& [id, tables] : lost_everywhere) {
    if (tables < kPriorMinNeighbours || kept.count(id) > 0) continue;
    losers[id] = "not measured: more than " + std::to_string(static_cast<int>(kPriorLossFactor)) +
                 "x slower than a configuration with at most its workspace at every micro-batch "
                 "size from " +
                 std::to_string(kPriorFromMicroBatch) + " on all " + std::to_string(tables) +
                 " nearby problems of this device";
  }
  return losers;
}

}  // namespace ucudnn
