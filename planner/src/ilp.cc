#include "ucudnn/planner/ilp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

// COIN-OR's headers are not warning-clean under -Wall -Wextra.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wdeprecated-copy"
#include <CbcModel.hpp>
#include <CoinMessageHandler.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#pragma GCC diagnostic pop

namespace ucudnn {
namespace {

// CBC and CLP print through a CoinMessageHandler; this one forwards to spdlog at debug level and
// keeps them silent otherwise.
class SpdlogMessageHandler : public CoinMessageHandler {
 public:
  SpdlogMessageHandler() {
    setLogLevel(spdlog::default_logger_raw()->should_log(spdlog::level::debug) ? 1 : 0);
  }
  CoinMessageHandler* clone() const override { return new SpdlogMessageHandler(*this); }
  int print() override {
    spdlog::debug("cbc: {}", messageBuffer());
    return 0;
  }
};

// Workspaces enter the model in MiB: coefficients near 1 keep the LP well scaled, and dividing by
// 2^20 is exact in double precision for any workspace below 2^53 bytes.
constexpr double kBytesToModelUnits = 1.0 / 1048576.0;

// CBC's absolute optimality tolerance, in ms of objective.
constexpr double kAllowableGapMs = 1e-9;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

uint64_t SaturatingMultiply(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    return std::numeric_limits<uint64_t>::max();
  }
  return a * b;
}

// One kernel's non-dominated options, by increasing workspace (and strictly decreasing time),
// with their indices in the caller's list.
struct ReducedOptions {
  std::vector<IlpOption> options;
  std::vector<int> original;
};

ReducedOptions Reduce(const std::vector<IlpOption>& options) {
  std::vector<int> order(options.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const IlpOption& x = options[static_cast<size_t>(a)];
    const IlpOption& y = options[static_cast<size_t>(b)];
    if (x.workspace_bytes != y.workspace_bytes) return x.workspace_bytes < y.workspace_bytes;
    if (x.time_ms != y.time_ms) return x.time_ms < y.time_ms;
    return a < b;
  });
  ReducedOptions reduced;
  for (int i : order) {
    const IlpOption& option = options[static_cast<size_t>(i)];
    if (!reduced.options.empty() && option.time_ms >= reduced.options.back().time_ms) continue;
    reduced.options.push_back(option);
    reduced.original.push_back(i);
  }
  return reduced;
}

// Kernels whose reduced option lists are identical: one integer count per option.
struct Group {
  std::vector<IlpOption> options;
  std::vector<int> members;  // kernel indices, ascending
  int first_column = 0;
};

// counts[g][j]: how many members of group g take option j.
using Counts = std::vector<std::vector<int64_t>>;

uint64_t CountsWorkspace(const std::vector<Group>& groups, const Counts& counts) {
  uint64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      total = SaturatingAdd(total, SaturatingMultiply(static_cast<uint64_t>(counts[g][j]),
                                                      groups[g].options[j].workspace_bytes));
    }
  }
  return total;
}

double CountsTime(const std::vector<Group>& groups, const Counts& counts) {
  double total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      total += static_cast<double>(counts[g][j]) * groups[g].options[j].time_ms;
    }
  }
  return total;
}

// Every member at its smallest workspace (feasible whenever anything is) or at its fastest.
Counts UniformCounts(const std::vector<Group>& groups, bool fastest) {
  Counts counts(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    counts[g].assign(groups[g].options.size(), 0);
    counts[g][fastest ? groups[g].options.size() - 1 : 0] =
        static_cast<int64_t>(groups[g].members.size());
  }
  return counts;
}

// Integral counts from column values, or false when they are not a valid assignment.
bool CountsFromColumns(const std::vector<Group>& groups, const double* columns, Counts* counts) {
  counts->assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    int64_t sum = 0;
    (*counts)[g].assign(groups[g].options.size(), 0);
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      const double value = columns[static_cast<size_t>(groups[g].first_column) + j];
      if (!std::isfinite(value) || std::fabs(value - std::round(value)) > 1e-4) return false;
      const int64_t count = std::llround(value);
      if (count < 0) return false;
      (*counts)[g][j] = count;
      sum += count;
    }
    if (sum != static_cast<int64_t>(groups[g].members.size())) return false;
  }
  return true;
}

// A feasible start from the LP relaxation: whole parts kept, each group's fractional remainder
// given to the smallest-workspace option among the fractional ones, which cannot need more
// workspace than the LP solution did. Falls back to the all-smallest assignment.
Counts RoundLpSolution(const std::vector<Group>& groups, const double* columns, uint64_t budget) {
  Counts counts(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    counts[g].assign(groups[g].options.size(), 0);
    int64_t assigned = 0;
    size_t remainder_to = groups[g].options.size();
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      const double value = std::max(0.0, columns[static_cast<size_t>(groups[g].first_column) + j]);
      const double whole = std::floor(value + 1e-9);
      counts[g][j] = static_cast<int64_t>(whole);
      assigned += counts[g][j];
      if (value - whole > 1e-9 && remainder_to == groups[g].options.size()) remainder_to = j;
    }
    const int64_t members = static_cast<int64_t>(groups[g].members.size());
    if (assigned > members) return UniformCounts(groups, false);
    if (remainder_to == groups[g].options.size()) remainder_to = 0;
    counts[g][remainder_to] += members - assigned;
  }
  if (CountsWorkspace(groups, counts) > budget) return UniformCounts(groups, false);
  return counts;
}

using Clock = std::chrono::steady_clock;

// Spends the budget left over by `counts` greedily: moves one member of a group to a faster option
// that still fits, the largest time gain first, until no move fits or the deadline passes. The LP
// rounding leaves about one option step of budget unused; this takes most of it back, so that CBC
// starts from an incumbent close to the LP bound and prunes early.
// `work`, when given, counts the options scanned.
void FillLeftover(const std::vector<Group>& groups, uint64_t budget, Clock::time_point deadline,
                  Counts* counts, uint64_t* work = nullptr) {
  uint64_t used = CountsWorkspace(groups, *counts);
  while (used < budget && Clock::now() < deadline) {
    const uint64_t left = budget - used;
    double best_gain = 0;
    size_t best_group = 0, best_from = 0, best_to = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<IlpOption>& options = groups[g].options;
      for (size_t from = 0; from + 1 < options.size(); ++from) {
        if ((*counts)[g][from] == 0) continue;
        // Options are by increasing workspace: the fastest that fits is the last that fits.
        size_t to = from;
        if (work != nullptr) *work += options.size() - from;
        while (to + 1 < options.size() &&
               options[to + 1].workspace_bytes - options[from].workspace_bytes <= left) {
          ++to;
        }
        const double gain = options[from].time_ms - options[to].time_ms;
        if (to > from && gain > best_gain) {
          best_gain = gain;
          best_group = g;
          best_from = from;
          best_to = to;
        }
      }
    }
    if (best_gain <= 0) return;
    const std::vector<IlpOption>& options = groups[best_group].options;
    --(*counts)[best_group][best_from];
    ++(*counts)[best_group][best_to];
    used += options[best_to].workspace_bytes - options[best_from].workspace_bytes;
  }
}

// Local search over "one member one option down, then refill" moves, kept while they lower the
// total time. Bounded by a fixed amount of work (options scanned), so that it stays cheap on huge
// models and its result does not depend on the machine's speed; and by the deadline, which only a
// solve that runs out of time reaches.
void ImproveBySwaps(const std::vector<Group>& groups, uint64_t budget, Clock::time_point deadline,
                    Counts* counts) {
  constexpr uint64_t kMaxWork = 20'000'000;
  uint64_t work = 0;
  uint64_t columns = 0;
  for (const Group& group : groups) columns += group.options.size();
  double best_time = CountsTime(groups, *counts);
  for (int pass = 0; pass < 8; ++pass) {
    bool improved = false;
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t from = 1; from < groups[g].options.size(); ++from) {
        if ((*counts)[g][from] == 0) continue;
        if (work > kMaxWork || Clock::now() >= deadline) return;
        work += columns;  // the copy and the evaluation
        Counts trial = *counts;
        --trial[g][from];
        ++trial[g][from - 1];
        FillLeftover(groups, budget, deadline, &trial, &work);
        const double time = CountsTime(groups, trial);
        if (time < best_time - 1e-12 * best_time) {
          best_time = time;
          *counts = std::move(trial);
          improved = true;
        }
      }
    }
    if (!improved) return;
  }
}

// Loads the model restricted to `kept` columns (indices into the full model, ascending).
// Columns: how many members of group g take option j. Rows: one per group (the counts sum to its
// size) and the budget over the workspace above each group's smallest option.
void LoadModel(const std::vector<Group>& groups, const std::vector<int>& kept, double budget_units,
               OsiClpSolverInterface* solver) {
  std::vector<std::pair<int, int>> where;  // full column -> (group, option)
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      where.emplace_back(static_cast<int>(g), static_cast<int>(j));
    }
  }
  const int rows = static_cast<int>(groups.size()) + 1;
  const int budget_row = rows - 1;
  const size_t columns = kept.size();
  std::vector<double> lower(columns, 0.0), upper(columns), objective(columns);
  std::vector<CoinBigIndex> starts;
  std::vector<int> row_index, lengths;
  std::vector<double> elements;
  for (size_t c = 0; c < columns; ++c) {
    const auto [g, j] = where[static_cast<size_t>(kept[c])];
    const Group& group = groups[static_cast<size_t>(g)];
    const IlpOption& option = group.options[static_cast<size_t>(j)];
    upper[c] = static_cast<double>(group.members.size());
    objective[c] = option.time_ms;
    starts.push_back(static_cast<CoinBigIndex>(elements.size()));
    row_index.push_back(g);
    elements.push_back(1.0);
    const uint64_t extra = option.workspace_bytes - group.options[0].workspace_bytes;
    if (extra > 0) {
      row_index.push_back(budget_row);
      elements.push_back(static_cast<double>(extra) * kBytesToModelUnits);
    }
    lengths.push_back(static_cast<int>(elements.size() - static_cast<size_t>(starts.back())));
  }
  starts.push_back(static_cast<CoinBigIndex>(elements.size()));
  std::vector<double> row_lower(static_cast<size_t>(rows)), row_upper(static_cast<size_t>(rows));
  for (size_t g = 0; g < groups.size(); ++g) {
    row_lower[g] = row_upper[g] = static_cast<double>(groups[g].members.size());
  }
  row_lower[static_cast<size_t>(budget_row)] = 0.0;
  row_upper[static_cast<size_t>(budget_row)] = budget_units;
  const CoinPackedMatrix matrix(true, rows, static_cast<int>(columns),
                                static_cast<CoinBigIndex>(elements.size()), elements.data(),
                                row_index.data(), starts.data(), lengths.data());
  solver->loadProblem(matrix, lower.data(), upper.data(), objective.data(), row_lower.data(),
                      row_upper.data());
}

std::vector<double> CountsToColumns(const std::vector<Group>& groups, const Counts& counts,
                                    int columns) {
  std::vector<double> values(static_cast<size_t>(columns), 0.0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t j = 0; j < groups[g].options.size(); ++j) {
      values[static_cast<size_t>(groups[g].first_column) + j] = static_cast<double>(counts[g][j]);
    }
  }
  return values;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Two total times that differ by at most this fraction count as equal in the tie rule.
constexpr double kRelativeTie = 1e-12;

// One member of group `group` moving from option `from` to option `to`.
struct Move {
  double time_ms;            // time lost (down) or saved (up), > 0
  uint64_t workspace_bytes;  // workspace saved (down) or needed (up)
  size_t group, from, to;
};

// Tie rule 2 of ilp.h: exchanges "one member of a group one or more options down (slower,
// smaller), one member of a group up (faster, larger)" that keep the total time (to kRelativeTie
// of `total_time_ms`) and shrink the total workspace, the largest saving first, until none is
// left, or the deadline passes. Each exchange shrinks the total workspace, so this ends; it
// never needs more budget.
void PreferSmallerWorkspace(const std::vector<Group>& groups, double total_time_ms,
                            Clock::time_point deadline, Counts* counts) {
  const double tolerance = kRelativeTie * total_time_ms;
  std::vector<Move> downs, ups;
  while (Clock::now() < deadline) {
    downs.clear();
    ups.clear();
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<IlpOption>& options = groups[g].options;
      for (size_t from = 0; from < options.size(); ++from) {
        if ((*counts)[g][from] == 0) continue;
        for (size_t to = 0; to < from; ++to) {
          downs.push_back({options[to].time_ms - options[from].time_ms,
                           options[from].workspace_bytes - options[to].workspace_bytes, g, from,
                           to});
        }
        for (size_t to = from + 1; to < options.size(); ++to) {
          ups.push_back({options[from].time_ms - options[to].time_ms,
                         options[to].workspace_bytes - options[from].workspace_bytes, g, from, to});
        }
      }
    }
    if (downs.empty() || ups.empty()) return;
    std::sort(ups.begin(), ups.end(), [](const Move& a, const Move& b) {
      if (a.time_ms != b.time_ms) return a.time_ms < b.time_ms;
      if (a.group != b.group) return a.group < b.group;
      if (a.from != b.from) return a.from < b.from;
      return a.to < b.to;
    });
    const Move* best_down = nullptr;
    const Move* best_up = nullptr;
    uint64_t best_saving = 0;
    for (const Move& down : downs) {
      auto it = std::lower_bound(ups.begin(), ups.end(), down.time_ms - tolerance,
                                 [](const Move& m, double t) { return m.time_ms < t; });
      for (; it != ups.end() && it->time_ms <= down.time_ms + tolerance; ++it) {
        const Move& up = *it;
        if (up.workspace_bytes >= down.workspace_bytes) continue;
        // Both moves start from the same member state: that needs two members there.
        if (up.group == down.group && up.from == down.from && (*counts)[up.group][up.from] < 2) {
          continue;
        }
        const uint64_t saving = down.workspace_bytes - up.workspace_bytes;
        if (saving > best_saving) {
          best_saving = saving;
          best_down = &down;
          best_up = &up;
        }
      }
    }
    if (best_down == nullptr) return;
    --(*counts)[best_down->group][best_down->from];
    ++(*counts)[best_down->group][best_down->to];
    --(*counts)[best_up->group][best_up->from];
    ++(*counts)[best_up->group][best_up->to];
  }
}

// The report's status from the objective and the proven bound (ilp.h says what each means).
// `proof_valid` is false when the bound was not established for this answer's search.
std::string Classify(double objective, double bound, double relative_gap, bool proof_valid,
                     bool time_up) {
  const double slack = std::max(kIlpOptimalAbsoluteMs, kIlpOptimalRelative * objective);
  const double excess = objective - bound;
  if (proof_valid && excess <= slack) return "optimal";
  if (excess <= relative_gap * objective + slack) return "gap_limit";
  return time_up ? "time_limit" : "stopped";
}

// Everything the phases of one solve share: the caller's input, the clock, and the model's
// groups of identical kernels.
struct Solve {
  const std::vector<std::vector<IlpOption>>& options;
  const uint64_t budget_bytes;
  const IlpOptions& ilp_options;
  const Clock::time_point start;
  Clock::time_point deadline;
  std::vector<ReducedOptions> reduced;  // per kernel
  std::vector<Group> groups;
  int columns = 0;

  double remaining_seconds() const {
    return std::chrono::duration<double>(deadline - Clock::now()).count();
  }
};

Status CheckIlpInput(const std::vector<std::vector<IlpOption>>& options,
                     const IlpOptions& ilp_options) {
  if (!(ilp_options.time_limit_s > 0) || !std::isfinite(ilp_options.time_limit_s)) {
    return InvalidArgument("time_limit_s: must be positive and finite, got " +
                           std::to_string(ilp_options.time_limit_s));
  }
  if (!(ilp_options.relative_gap >= 0) || !std::isfinite(ilp_options.relative_gap)) {
    return InvalidArgument("relative_gap: must be non-negative and finite");
  }
  for (size_t k = 0; k < options.size(); ++k) {
    if (options[k].empty()) {
      return InvalidArgument("options[" + std::to_string(k) + "]: a kernel needs an option");
    }
    for (const IlpOption& option : options[k]) {
      if (!std::isfinite(option.time_ms) || option.time_ms < 0) {
        return InvalidArgument("options[" + std::to_string(k) +
                               "].time_ms: must be finite and non-negative");
      }
    }
  }
  return Status::Ok();
}

// Kernels with identical reduced option lists, in order of first appearance, and their columns.
void GroupIdenticalKernels(Solve* s) {
  s->reduced.reserve(s->options.size());
  for (const auto& kernel_options : s->options) s->reduced.push_back(Reduce(kernel_options));
  std::map<std::vector<std::pair<double, uint64_t>>, size_t> index;
  for (size_t k = 0; k < s->reduced.size(); ++k) {
    std::vector<std::pair<double, uint64_t>> key;
    for (const IlpOption& o : s->reduced[k].options) key.emplace_back(o.time_ms, o.workspace_bytes);
    auto [it, inserted] = index.try_emplace(std::move(key), s->groups.size());
    if (inserted) s->groups.push_back(Group{s->reduced[k].options, {}, 0});
    s->groups[it->second].members.push_back(static_cast<int>(k));
  }
  for (Group& group : s->groups) {
    group.first_column = s->columns;
    s->columns += static_cast<int>(group.options.size());
  }
}

IlpSolution EmptySolution(const Solve& s) {
  IlpSolution solution;
  solution.report.used = true;
  solution.report.variables = s.columns;
  solution.report.constraints = static_cast<int>(s.groups.size()) + 1;
  return solution;
}

// Tie rule 3: the members of each group, in kernel order, take its options by increasing
// workspace. The choice is an index into the caller's options of each kernel.
std::vector<int> ChoicePerKernel(const Solve& s, const Counts& counts) {
  std::vector<int> choice(s.options.size(), -1);
  for (size_t g = 0; g < s.groups.size(); ++g) {
    size_t member = 0;
    for (size_t j = 0; j < s.groups[g].options.size(); ++j) {
      for (int64_t c = 0; c < counts[g][j]; ++c, ++member) {
        const int kernel = s.groups[g].members[member];
        choice[static_cast<size_t>(kernel)] = s.reduced[static_cast<size_t>(kernel)].original[j];
      }
    }
  }
  return choice;
}

// Ends the solve with `counts`: the tie rules, the choice per kernel, the totals, and the status
// from the objective and `bound` as they are.
IlpSolution Finish(const Solve& s, Counts counts, double bound, bool proof_valid, bool time_up) {
  PreferSmallerWorkspace(s.groups, CountsTime(s.groups, counts), s.deadline, &counts);
  IlpSolution solution = EmptySolution(s);
  solution.choice = ChoicePerKernel(s, counts);
  // Totals in kernel order, so they do not depend on how kernels were grouped.
  for (size_t k = 0; k < s.options.size(); ++k) {
    const IlpOption& o = s.options[k][static_cast<size_t>(solution.choice[k])];
    solution.total_time_ms += o.time_ms;
    solution.total_workspace_bytes =
        SaturatingAdd(solution.total_workspace_bytes, o.workspace_bytes);
  }
  IlpReport& report = solution.report;
  report.objective_ms = solution.total_time_ms;
  report.bound_ms = bound;
  const double excess = report.objective_ms - report.bound_ms;
  report.gap = report.objective_ms > 0 ? excess / report.objective_ms
               : excess == 0           ? 0.0
                                       : std::numeric_limits<double>::infinity();
  report.status =
      Classify(report.objective_ms, bound, s.ilp_options.relative_gap, proof_valid, time_up);
  report.solve_seconds = SecondsSince(s.start);
  spdlog::debug(
      "ilp: {} kernels in {} groups, {} columns: {}, objective {:.6f} ms, bound {:.6f} ms, "
      "gap {:.3g}, {:.3f} s",
      s.options.size(), s.groups.size(), s.columns, report.status, report.objective_ms,
      report.bound_ms, report.gap, report.solve_seconds);
  return solution;
}

// Reduced-cost elimination: a column at zero with reduced cost rc raises any solution that uses
// it to at least lp_bound + rc, so columns with rc above the incumbent's excess cannot improve on
// it and leave the model. The incumbent's own columns all stay (each of its columns' rc * count
// is part of that excess). Smaller node LPs make the search much faster. A bound of the reduced
// model is one of the full model up to the incumbent's time.
std::vector<int> ColumnsThatCanImprove(const OsiClpSolverInterface& relaxation, int columns,
                                       double incumbent_time, double lp_bound) {
  const double* reduced_cost = relaxation.getReducedCost();
  const double* lp_values = relaxation.getColSolution();
  const double excess = incumbent_time - lp_bound;
  std::vector<int> kept;
  for (int c = 0; c < columns; ++c) {
    // The margin covers CLP's dual tolerance: a column kept in doubt costs only a little time.
    if (lp_values[c] > 1e-9 || reduced_cost[c] <= excess + 1e-6 * std::max(1.0, incumbent_time)) {
      kept.push_back(c);
    }
  }
  return kept;
}

// The branch and bound's answer, checked: its counts when they are exact and faster than the
// incumbent's, else the incumbent's.
struct SearchResult {
  Counts counts;
  bool rejected = false;  // CBC's solution failed the exact check
  double cbc_objective = std::numeric_limits<double>::infinity();
};

SearchResult CheckedSearchResult(const Solve& s, const CbcModel& model,
                                 const std::vector<int>& kept, const Counts& incumbent,
                                 double incumbent_time) {
  SearchResult result;
  result.counts = incumbent;
  const double* best = model.bestSolution();
  if (best == nullptr) return result;
  result.cbc_objective = model.getObjValue();
  std::vector<double> full(static_cast<size_t>(s.columns), 0.0);
  for (size_t i = 0; i < kept.size(); ++i) full[static_cast<size_t>(kept[i])] = best[i];
  Counts found;
  // CBC's tolerances should never let a solution past the budget by a byte, but check exactly.
  if (!CountsFromColumns(s.groups, full.data(), &found) ||
      CountsWorkspace(s.groups, found) > s.budget_bytes) {
    result.rejected = true;
    spdlog::debug("ilp: CBC's solution ({:.6f} ms) fails the exact check; keeping the incumbent",
                  result.cbc_objective);
  } else if (CountsTime(s.groups, found) < incumbent_time) {
    result.counts = std::move(found);
  }
  return result;
}

// CBC's bound. A search that ran out of nodes (secondary status 0, or 1: the root itself was
// pruned against the incumbent by cuts and reduced-cost fixing) proved its best solution optimal,
// to its cutoff increment (which CBC raises above its 1e-5 default only where the objective is
// provably a multiple of it): the bound is that solution's time. CBC reports it as
// getBestPossibleObjValue() after a tree search, but after a proof at the root leaves the initial
// LP value there. Otherwise (gap or time limit) the bound is getBestPossibleObjValue(), the least
// bound of the open nodes.
double SearchBound(const CbcModel& model, const SearchResult& result, double incumbent_time,
                   double lp_bound) {
  const int secondary = model.secondaryStatus();
  const bool exhausted = model.isProvenOptimal() && (secondary == 0 || secondary == 1) &&
                         model.bestSolution() != nullptr;
  double bound = exhausted ? result.cbc_objective : model.getBestPossibleObjValue();
  // CBC's bound holds for the reduced model; answers outside it are slower than the incumbent.
  bound = std::min(bound, incumbent_time);
  // After a rejected solution CBC pruned against that solution's time: nothing is proven
  // beyond it.
  if (result.rejected) bound = std::min(bound, result.cbc_objective);
  return std::max(lp_bound, bound);
}

// CBC over the `kept` columns, started from the incumbent, until the gap or the deadline.
IlpSolution BranchAndBound(const Solve& s, const std::vector<int>& kept, double budget_units,
                           Counts incumbent, double lp_bound, SpdlogMessageHandler* handler) {
  const double incumbent_time = CountsTime(s.groups, incumbent);
  OsiClpSolverInterface restricted;
  restricted.passInMessageHandler(handler);
  LoadModel(s.groups, kept, budget_units, &restricted);
  for (int c = 0; c < static_cast<int>(kept.size()); ++c) restricted.setInteger(c);

  CbcModel model(restricted);  // copies the solver
  model.passInMessageHandler(handler);
  model.setLogLevel(handler->logLevel());
  model.setNumberThreads(0);  // deterministic: one thread
  model.setUseElapsedTime(true);
  model.setAllowableFractionGap(s.ilp_options.relative_gap);
  model.setAllowableGap(kAllowableGapMs);
  model.initialSolve();
  {
    const std::vector<double> full = CountsToColumns(s.groups, incumbent, s.columns);
    std::vector<double> start_columns(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) start_columns[i] = full[static_cast<size_t>(kept[i])];
    model.setBestSolution(start_columns.data(), static_cast<int>(kept.size()), incumbent_time,
                          true);
  }
  spdlog::debug("ilp: LP bound {:.6f} ms, incumbent {:.6f} ms, {} of {} columns kept", lp_bound,
                incumbent_time, kept.size(), s.columns);
  const double cbc_seconds = s.remaining_seconds();
  if (cbc_seconds <= 0) return Finish(s, std::move(incumbent), lp_bound, true, true);
  model.setMaximumSeconds(cbc_seconds);
  model.branchAndBound();

  SearchResult result = CheckedSearchResult(s, model, kept, incumbent, incumbent_time);
  const double bound = SearchBound(model, result, incumbent_time, lp_bound);
  const bool time_up = model.isSecondsLimitReached() || s.remaining_seconds() <= 0;
  return Finish(s, std::move(result.counts), bound, !result.rejected, time_up);
}

// The budget binds: the LP relaxation gives a bound and a rounded incumbent, improved locally;
// CBC searches only when that incumbent is not within the gap.
Result<IlpSolution> SolveWithRelaxation(const Solve& s, const Counts& smallest,
                                        uint64_t smallest_total, double fastest_bound) {
  SpdlogMessageHandler handler;
  const double budget_units =
      static_cast<double>(s.budget_bytes - smallest_total) * kBytesToModelUnits;
  std::vector<int> all_columns(static_cast<size_t>(s.columns));
  for (int c = 0; c < s.columns; ++c) all_columns[static_cast<size_t>(c)] = c;
  OsiClpSolverInterface relaxation;
  relaxation.passInMessageHandler(&handler);
  LoadModel(s.groups, all_columns, budget_units, &relaxation);
  // CLP's limit counts from here, in CPU time (CBC's is wall time).
  relaxation.getModelPtr()->setMaximumSeconds(std::max(0.0, s.remaining_seconds()));
  relaxation.initialSolve();
  if (!relaxation.isProvenOptimal()) {
    if (!relaxation.isIterationLimitReached() && s.remaining_seconds() > 0) {
      return Internal("CLP: the LP relaxation did not solve although a feasible point exists");
    }
    // Out of time before the LP's bound: the smallest workspaces, filled greedily while time is
    // left (none, as a rule), against the fastest options' bound.
    Counts incumbent = smallest;
    FillLeftover(s.groups, s.budget_bytes, s.deadline, &incumbent);
    return Finish(s, std::move(incumbent), fastest_bound, true, true);
  }
  const double lp_bound = std::max(fastest_bound, relaxation.getObjValue());
  Counts incumbent = RoundLpSolution(s.groups, relaxation.getColSolution(), s.budget_bytes);
  FillLeftover(s.groups, s.budget_bytes, s.deadline, &incumbent);
  ImproveBySwaps(s.groups, s.budget_bytes, s.deadline, &incumbent);
  const double incumbent_time = CountsTime(s.groups, incumbent);
  if (Classify(incumbent_time, lp_bound, s.ilp_options.relative_gap, true, false) != "stopped") {
    spdlog::debug("ilp: the rounded LP solution is within the gap: no search");
    return Finish(s, std::move(incumbent), lp_bound, true, false);
  }
  if (s.remaining_seconds() <= 0) return Finish(s, std::move(incumbent), lp_bound, true, true);
  const std::vector<int> kept =
      ColumnsThatCanImprove(relaxation, s.columns, incumbent_time, lp_bound);
  return BranchAndBound(s, kept, budget_units, std::move(incumbent), lp_bound, &handler);
}

}  // namespace

std::vector<IlpOption> ToIlpOptions(const std::vector<KernelConfig>& front) {
  std::vector<IlpOption> options;
  options.reserve(front.size());
  for (const KernelConfig& config : front) {
    options.push_back(IlpOption{config.time_ms, config.workspace_bytes});
  }
  return options;
}

Result<IlpSolution> SolveNetworkIlp(const std::vector<std::vector<IlpOption>>& options,
                                    uint64_t budget_bytes, const IlpOptions& ilp_options) {
  Solve s{options, budget_bytes, ilp_options, Clock::now(), {}, {}, {}, 0};
  UCUDNN_RETURN_IF_ERROR(CheckIlpInput(options, ilp_options));
  // Limits beyond a day mean "no limit"; the cap keeps the time point arithmetic in range.
  s.deadline = s.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                             std::min(ilp_options.time_limit_s, 86400.0)));
  GroupIdenticalKernels(&s);

  const Counts smallest = UniformCounts(s.groups, false);
  const uint64_t smallest_total = CountsWorkspace(s.groups, smallest);
  if (smallest_total > budget_bytes) {
    IlpSolution solution = EmptySolution(s);
    solution.report.status = "infeasible";
    solution.report.solve_seconds = SecondsSince(s.start);
    return solution;
  }
  // No answer is faster than every kernel at its fastest option: the first bound.
  double fastest_bound = 0;
  for (const ReducedOptions& r : s.reduced) fastest_bound += r.options.back().time_ms;
  const Counts fastest = UniformCounts(s.groups, true);
  if (CountsWorkspace(s.groups, fastest) <= budget_bytes) {
    return Finish(s, fastest, fastest_bound, true, false);  // optimal without a search
  }
  return SolveWithRelaxation(s, smallest, smallest_total, fastest_bound);
}

}  // namespace ucudnn
