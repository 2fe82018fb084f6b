// ucudnn-bench-engine --replay-pruning: the worker's search rules replayed on measured tables
// (--data-dir, data/h100/*.csv by default: exhaustive ones), without a GPU. A backend answers every
// timed call from the table (each sample the row's median, times 1 + a uniform error within
// --probe-noise, for the spread of an idle GPU), so the real engine (BenchmarkMicroBatches) makes
// its probe-pruning and skipping decisions in the worker's order exactly as on the device. Reported
// per network and precision: configurations given the full protocol, kept at their probe, or not
// run; runs and device time spent; and the planner's predicted step (PlanNetwork per kernel at 64
// MiB and 1 GiB) from the pruned tables against the exhaustive ones; where the GPU's own pruned
// table lies beside an exhaustive one (scripts/gpu_search.sh --offline), its plans too.
//
//   build/bin/ucudnn-bench-engine --replay-pruning --json > bench/results/cpu/pruning.json
#include "pruning_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ucudnn/core/networks.h"
#include "ucudnn/core/size_rule.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/engine/benchmark.h"
#include "ucudnn/engine/search_prior.h"
#include "ucudnn/planner/planner.h"

namespace ucudnn {
namespace {

// The two tables of scripts/gpu_search.sh --offline.
constexpr std::string_view kPrunedSuffix = "-pruned.csv";
constexpr std::string_view kExhaustiveSuffix = "-exhaustive.csv";

// Answers from one problem's measured table.
class ReplayBackend : public ConvBackend {
 public:
  ReplayBackend(const TimingTable& table, double noise, uint64_t seed)
      : table_(table), noise_(noise), rng_(seed) {
    fingerprint_.backend = "replay";
    fingerprint_.name = "measured tables";
  }
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp) const override {
    std::set<int> ids;
    for (const Timing& t : table_.entries) ids.insert(t.algo);
    std::vector<AlgorithmInfo> out;
    for (int id : ids) out.push_back({id, std::to_string(id)});
    return out;
  }
  std::vector<Timing> Candidates(const ConvProblem&, int64_t batch) override {
    std::vector<Timing> out;
    for (const Timing& t : table_.entries) {
      if (t.micro_batch != batch) continue;
      Timing c;
      c.algo = t.algo;
      c.engine_config = t.engine_config;
      out.push_back(std::move(c));
    }
    return out;
  }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t batch, const Algorithm& algo) override {
    const Timing* t = Find(batch, algo);
    if (t == nullptr) return Unsupported("not in the table");
    if (t->status == TimingStatus::kUnsupported) return Unsupported(t->error);
    return static_cast<size_t>(t->workspace_bytes);
  }
  Status Run(const ConvProblem&, int64_t, const Algorithm&, const ConvOperands&, void*, size_t,
             float, float) override {
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    return std::unique_ptr<BackendBuffer>(std::make_unique<Dummy>(bytes));
  }
  Status CopyToDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyToHost(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyWithinDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Result<std::vector<double>> TimeRuns(const ConvProblem& p, int64_t batch, const Algorithm& algo,
                                       const ConvOperands& o, void* ws, size_t ws_bytes, int warmup,
                                       int runs) override {
    return TimeRunGroups(p, batch, algo, o, ws, ws_bytes, warmup, runs, 1, false);
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem&, int64_t batch,
                                            const Algorithm& algo, const ConvOperands&, void*,
                                            size_t, int warmup, int samples, int group,
                                            bool) override {
    const Timing* t = Find(batch, algo);
    if (t == nullptr || t->status != TimingStatus::kOk) {
      return Internal("replay: no measured time for this configuration");
    }
    const int64_t runs = warmup + static_cast<int64_t>(samples) * group;
    runs_ += runs;
    device_ms_ += static_cast<double>(runs) * t->time_ms;
    std::uniform_real_distribution<double> error(-noise_, noise_);
    std::vector<double> out;
    for (int i = 0; i < samples; ++i) out.push_back(t->time_ms * (1.0 + error(rng_)));
    return out;
  }
  int64_t runs() const { return runs_; }
  double device_ms() const { return device_ms_; }

 private:
  class Dummy : public BackendBuffer {
   public:
    explicit Dummy(size_t bytes) : bytes_(bytes) {}
    void* data() override { return &byte_; }
    size_t size() const override { return bytes_; }

   private:
    size_t bytes_;
    char byte_ = 0;
  };
  const Timing* Find(int64_t batch, const Algorithm& algo) const {
    for (const Timing& t : table_.entries) {
      if (t.micro_batch == batch && t.algo == algo.id &&
          t.engine_config == std::string(algo.engine_config)) {
        return &t;
      }
    }
    return nullptr;
  }

  const TimingTable& table_;
  DeviceFingerprint fingerprint_;
  double noise_;
  std::mt19937_64 rng_;
  int64_t runs_ = 0;
  double device_ms_ = 0;
};

struct SearchCost {
  int64_t configurations = 0;  // (size, algorithm) entries with a measured time in the data
  int64_t full_protocol = 0;   // timed with the full protocol
  int64_t probe_only = 0;      // kept at their probe (dominated)
  int64_t not_run = 0;         // skipped across sizes
  int64_t runs = 0;
  double device_ms = 0;
};

// What one problem's replayed search (`table`, on `backend`) cost, added to `cost`.
void CountSearch(const TimingTable& table, const ReplayBackend& backend, SearchCost& cost) {
  for (const Timing& t : table.entries) {
    if (t.status == TimingStatus::kOk && t.samples == 1) ++cost.probe_only;
    if (t.status == TimingStatus::kOk && t.samples > 1) ++cost.full_protocol;
    if (IsWorkerLimit(t) && t.error.find("not measured") != std::string::npos) ++cost.not_run;
  }
  cost.runs += backend.runs();
  cost.device_ms += backend.device_ms();
}

// Replays every problem of `tables` with `options`; the tables the engine returns, by key.
// With `use_prior`, each problem also leaves out what lost on every nearby problem replayed
// before it (PriorLosers over the tables the pruned search produced), as a worker does with its
// device's done jobs.
Result<std::map<std::string, TimingTable>> Replay(const TimingTables& tables,
                                                  BenchmarkOptions options, double noise,
                                                  bool use_prior, SearchCost& cost) {
  std::map<std::string, TimingTable> out;
  uint64_t seed = 1;
  for (const auto& [key, measured] : tables) {
    std::vector<KnownTable> known;
    for (const auto& [done_key, done] : out) known.push_back({tables.at(done_key).problem, done});
    const std::map<std::string, std::string> prior =
        use_prior ? PriorLosers(measured.problem, known) : std::map<std::string, std::string>{};
    options.prior = prior.empty() ? nullptr : &prior;
    std::set<int64_t> size_set;
    for (const Timing& t : measured.table.entries) {
      size_set.insert(t.micro_batch);
      cost.configurations += t.status == TimingStatus::kOk ? 1 : 0;
    }
    ReplayBackend backend(measured.table, noise, seed++);
    UCUDNN_ASSIGN_OR_RETURN(
        TimingTable table,
        BenchmarkMicroBatches(backend, measured.problem,
                              std::vector<int64_t>(size_set.begin(), size_set.end()), options));
    CountSearch(table, backend, cost);
    out[key] = std::move(table);
  }
  return out;
}

// The worker's search for one workspace limit (BenchmarkForLimit: the size rule's rounds, from
// nothing known) replayed on every problem of `tables` with `options`; the tables it returns.
Result<std::map<std::string, TimingTable>> ReplayForLimit(const TimingTables& tables,
                                                          const BenchmarkOptions& options,
                                                          double noise, uint64_t workspace,
                                                          SearchCost& cost) {
  std::map<std::string, TimingTable> out;
  uint64_t seed = 1;
  for (const auto& [key, measured] : tables) {
    for (const Timing& t : measured.table.entries) {
      cost.configurations += t.status == TimingStatus::kOk ? 1 : 0;
    }
    ReplayBackend backend(measured.table, noise, seed++);
    UCUDNN_ASSIGN_OR_RETURN(TimingTable table,
                            BenchmarkForLimit(backend, measured.problem, measured.mini_batch,
                                              BatchPolicy::kPowerOfTwo, workspace, {}, options));
    CountSearch(table, backend, cost);
    out[key] = std::move(table);
  }
  return out;
}

// The step a plan made from `tables` really takes: its segments timed with the measured medians
// (`measured`), so that neither search is credited with a lucky noisy sample.
struct PlanTimes {
  double predicted_ms = 0;  // as the planner predicted from the replayed tables
  double measured_ms = 0;   // its segments at the measured medians
};
Result<PlanTimes> PlanTime(const std::vector<Kernel>& kernels,
                           const std::map<std::string, TimingTable>& tables,
                           const TimingTables& measured, uint64_t workspace) {
  PlanRequest request;
  request.kernels = kernels;
  request.policy = BatchPolicy::kPowerOfTwo;
  request.workspace_mode = WorkspaceMode::kPerKernel;
  request.workspace_bytes = workspace;
  std::vector<const TimingTable*> pointers;
  for (const Kernel& k : kernels) {
    auto it = tables.find(CanonicalKey(k.problem));
    pointers.push_back(it == tables.end() ? nullptr : &it->second);
  }
  UCUDNN_ASSIGN_OR_RETURN(NetworkPlan plan, PlanNetwork(request, pointers));
  PlanTimes times;
  times.predicted_ms = plan.total_time_ms;
  for (const KernelPlan& k : plan.kernels) {
    if (k.status != KernelPlanStatus::kPlanned) continue;
    const TimingTable& table = measured.at(CanonicalKey(k.kernel.problem)).table;
    for (const Segment& segment : k.config.segments) {
      const auto row =
          std::find_if(table.entries.begin(), table.entries.end(), [&](const Timing& t) {
            return t.micro_batch == segment.micro_batch && t.algo == segment.algo &&
                   t.engine_config == segment.engine_config;
          });
      if (row == table.entries.end() || row->status != TimingStatus::kOk) {
        return Internal("a planned segment has no measured time in the exhaustive data: " +
                        CanonicalKey(k.kernel.problem) + " micro-batch " +
                        std::to_string(segment.micro_batch));
      }
      times.measured_ms += row->time_ms;
    }
  }
  return times;
}

// The measured tables of `data_dir` to replay, by name. A search's own table
// (scripts/gpu_search.sh --offline: NAME-pruned.csv beside NAME-exhaustive.csv) is not replayed:
// its plans are compared with the exhaustive one's.
std::vector<std::filesystem::path> MeasuredFiles(const std::string& data_dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir)) {
    if (entry.path().extension() == ".csv" && !entry.path().string().ends_with(kPrunedSuffix)) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The kernels of the network a file measured: its layer names say which ("r50." ...), its
// problems which precision; every kernel is planned from its problem's table.
std::vector<Kernel> KernelsOf(const TimingTables& tables) {
  std::vector<Kernel> kernels;
  for (const auto& [key, measured] : tables) {
    Kernel k;
    k.problem = measured.problem;
    k.mini_batch = measured.mini_batch;
    k.name = measured.layer + "/" + std::string(ToString(measured.problem.op));
    kernels.push_back(std::move(k));
  }
  return kernels;
}

nlohmann::ordered_json CostJson(const SearchCost& c) {
  return {{"configurations", c.configurations},
          {"full_protocol", c.full_protocol},
          {"probe_only", c.probe_only},
          {"not_run", c.not_run},
          {"runs", c.runs},
          {"device_ms", c.device_ms}};
}

// The limit-aware size rule (core/size_rule.h) on the measured tables: per workspace limit,
// each problem's table cut to the sizes a search for that limit times (the measured medians kept),
// what that leaves of the table, and the plans at that limit from the cut tables against those
// from the whole tables, both timed with the measured medians. And the plans at each limit from
// the tables cut for each smaller one ("from_smaller_limit"): the server asks one search of a
// problem, for the smallest limit of its kernels, and plans the others from that table.
Result<nlohmann::ordered_json> LimitAwareSizes(const std::vector<Kernel>& kernels,
                                               const TimingTables& tables,
                                               const BenchmarkOptions& search, double noise) {
  std::map<std::string, TimingTable> whole;
  for (const auto& [key, measured] : tables) whole[key] = measured.table;
  const std::vector<uint64_t> limits = {uint64_t{1} << 20, uint64_t{8} << 20, uint64_t{64} << 20,
                                        uint64_t{1} << 30};
  std::map<uint64_t, std::map<std::string, TimingTable>> cut_for;  // by the limit cut for
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (uint64_t workspace : limits) {
    std::map<std::string, TimingTable>& cut = cut_for[workspace];
    int64_t rows = 0, rows_kept = 0, sizes = 0, sizes_kept = 0;
    double ms = 0, ms_kept = 0;
    for (const auto& [key, measured] : tables) {
      std::set<int64_t> size_set;
      for (const Timing& t : measured.table.entries) size_set.insert(t.micro_batch);
      const std::vector<int64_t> kept = SizesForLimit(
          measured.table, {size_set.begin(), size_set.end()}, measured.mini_batch, workspace);
      const std::set<int64_t> kept_set(kept.begin(), kept.end());
      sizes += static_cast<int64_t>(size_set.size());
      sizes_kept += static_cast<int64_t>(kept.size());
      TimingTable& table = cut[key];
      for (const Timing& t : measured.table.entries) {
        const bool keep = kept_set.count(t.micro_batch) > 0;
        if (keep) table.entries.push_back(t);
        if (t.status != TimingStatus::kOk) continue;
        ++rows;
        ms += t.time_ms;
        rows_kept += keep ? 1 : 0;
        ms_kept += keep ? t.time_ms : 0;
      }
    }
    UCUDNN_ASSIGN_OR_RETURN(PlanTimes all, PlanTime(kernels, whole, tables, workspace));
    UCUDNN_ASSIGN_OR_RETURN(PlanTimes limited, PlanTime(kernels, cut, tables, workspace));
    // The worker's search for this limit as it runs (its rounds, probes and skips).
    SearchCost searched_cost;
    UCUDNN_ASSIGN_OR_RETURN(auto searched,
                            ReplayForLimit(tables, search, noise, workspace, searched_cost));
    UCUDNN_ASSIGN_OR_RETURN(PlanTimes searched_plan,
                            PlanTime(kernels, searched, tables, workspace));
    nlohmann::ordered_json from_smaller = nlohmann::ordered_json::array();
    for (uint64_t smaller : limits) {
      if (smaller >= workspace) break;
      UCUDNN_ASSIGN_OR_RETURN(PlanTimes planned,
                              PlanTime(kernels, cut_for[smaller], tables, workspace));
      from_smaller.push_back(
          {{"cut_for_workspace_bytes", smaller},
           {"plan_measured_ms", planned.measured_ms},
           {"vs_all_sizes_measured", (planned.measured_ms - all.measured_ms) / all.measured_ms}});
    }
    out.push_back({{"workspace_bytes", workspace},
                   {"sizes_kept", static_cast<double>(sizes_kept) / sizes},
                   {"timings_kept", static_cast<double>(rows_kept) / rows},
                   {"timed_ms_kept", ms_kept / ms},
                   {"all_sizes_plan_measured_ms", all.measured_ms},
                   {"limit_sizes_plan_measured_ms", limited.measured_ms},
                   {"limit_sizes_vs_all_sizes_measured",
                    (limited.measured_ms - all.measured_ms) / all.measured_ms},
                   {"from_smaller_limit", from_smaller},
                   {"limit_search", CostJson(searched_cost)},
                   {"limit_search_plan_vs_all_sizes_measured",
                    (searched_plan.measured_ms - all.measured_ms) / all.measured_ms}});
  }
  return out;
}

}  // namespace

Result<nlohmann::ordered_json> ReplaySizes(const std::string& data_dir) {
  nlohmann::ordered_json networks = nlohmann::ordered_json::array();
  // The worker's search (its default rules) on one thread; the probes' noise as a GPU's.
  BenchmarkOptions search;
  search.prepare_threads = 1;
  search.check_results = false;  // a replayed run computes nothing to check
  constexpr double kNoise = 0.02;
  for (const auto& file : MeasuredFiles(data_dir)) {
    UCUDNN_ASSIGN_OR_RETURN(TimingTables tables, ReadTimingCsvFile(file.string()));
    if (tables.empty()) continue;
    // The worker's search over every size (its defaults), for the limits' searches to compare.
    SearchCost all_sizes_cost;
    UCUDNN_RETURN_IF_ERROR(Replay(tables, search, kNoise, false, all_sizes_cost).status());
    UCUDNN_ASSIGN_OR_RETURN(nlohmann::ordered_json limits,
                            LimitAwareSizes(KernelsOf(tables), tables, search, kNoise));
    networks.push_back({{"file", file.filename().string()},
                        {"problems", tables.size()},
                        {"mini_batch", tables.begin()->second.mini_batch},
                        {"all_sizes_search", CostJson(all_sizes_cost)},
                        {"limits", limits}});
  }
  return nlohmann::ordered_json{
      {"benchmark", "limit-aware micro-batch sizes, replayed"},
      {"command", "build/bin/ucudnn-bench-engine --replay-sizes --data-dir DIR"},
      {"note",
       "per workspace limit, each measured table cut to the micro-batch sizes a search for "
       "that limit would time (core/size_rule.h SizesForLimit), the shares of sizes, of kOk "
       "timings and of their summed medians kept, and the per-kernel plans at that limit "
       "(PlanNetwork, power-of-two sizes) from the cut tables against those from the whole "
       "tables, both timed with the measured medians: limit_sizes_vs_all_sizes_measured is "
       "what the rule costs the step; from_smaller_limit: the plans at that limit from the "
       "tables cut for each smaller limit (the server searches a problem for its kernels' "
       "smallest limit and plans the others from that table); all_sizes_search and "
       "limit_search: the worker's search (its default probes and skips, 2% noise) replayed "
       "over every size and in the rule's rounds for that limit (BenchmarkForLimit), its "
       "device time the replayed runs at the measured medians (result checks not counted), "
       "and limit_search_plan_vs_all_sizes_measured the plans from the latter's tables"},
      {"networks", networks}};
}

Result<nlohmann::ordered_json> ReplayPruning(const std::string& data_dir, double probe_noise,
                                             BenchmarkOptions pruned) {
  nlohmann::ordered_json networks = nlohmann::ordered_json::array();
  BenchmarkOptions exhaustive;
  exhaustive.prune_margin = -1;
  exhaustive.skip_factor = 0;
  exhaustive.prepare_threads = 1;
  pruned.prepare_threads = 1;
  for (const auto& file : MeasuredFiles(data_dir)) {
    UCUDNN_ASSIGN_OR_RETURN(TimingTables tables, ReadTimingCsvFile(file.string()));
    if (tables.empty()) continue;
    const ProblemTimings& first = tables.begin()->second;
    const std::vector<Kernel> kernels = KernelsOf(tables);
    SearchCost full_cost, pruned_cost, prior_cost;
    UCUDNN_ASSIGN_OR_RETURN(auto full_tables,
                            Replay(tables, exhaustive, probe_noise, false, full_cost));
    UCUDNN_ASSIGN_OR_RETURN(auto pruned_tables,
                            Replay(tables, pruned, probe_noise, false, pruned_cost));
    UCUDNN_ASSIGN_OR_RETURN(auto prior_tables,
                            Replay(tables, pruned, probe_noise, true, prior_cost));
    // The pruned search as the GPU ran it, where its table came back beside this one.
    std::map<std::string, TimingTable> measured_pruned;
    const std::string name = file.string();
    if (name.ends_with(kExhaustiveSuffix)) {
      const std::string sibling =
          name.substr(0, name.size() - kExhaustiveSuffix.size()) + std::string(kPrunedSuffix);
      if (std::filesystem::exists(sibling)) {
        UCUDNN_ASSIGN_OR_RETURN(TimingTables pruned_run, ReadTimingCsvFile(sibling));
        for (auto& [key, measured] : pruned_run) measured_pruned[key] = std::move(measured.table);
      }
    }
    nlohmann::ordered_json plans = nlohmann::ordered_json::array();
    for (uint64_t workspace : {uint64_t{64} << 20, uint64_t{1} << 30}) {
      UCUDNN_ASSIGN_OR_RETURN(PlanTimes full, PlanTime(kernels, full_tables, tables, workspace));
      UCUDNN_ASSIGN_OR_RETURN(PlanTimes pruned,
                              PlanTime(kernels, pruned_tables, tables, workspace));
      UCUDNN_ASSIGN_OR_RETURN(PlanTimes with_prior,
                              PlanTime(kernels, prior_tables, tables, workspace));
      plans.push_back({{"workspace_bytes", workspace},
                       {"exhaustive_plan_predicted_ms", full.predicted_ms},
                       {"pruned_plan_predicted_ms", pruned.predicted_ms},
                       {"exhaustive_plan_measured_ms", full.measured_ms},
                       {"pruned_plan_measured_ms", pruned.measured_ms},
                       {"pruned_vs_exhaustive_measured",
                        (pruned.measured_ms - full.measured_ms) / full.measured_ms},
                       {"pruned_with_prior_plan_measured_ms", with_prior.measured_ms},
                       {"pruned_with_prior_vs_exhaustive_measured",
                        (with_prior.measured_ms - full.measured_ms) / full.measured_ms}});
      if (!measured_pruned.empty()) {
        UCUDNN_ASSIGN_OR_RETURN(PlanTimes gpu_pruned,
                                PlanTime(kernels, measured_pruned, tables, workspace));
        plans.back()["gpu_pruned_plan_measured_ms"] = gpu_pruned.measured_ms;
        plans.back()["gpu_pruned_vs_exhaustive_measured"] =
            (gpu_pruned.measured_ms - full.measured_ms) / full.measured_ms;
      }
    }
    networks.push_back(
        {{"file", file.filename().string()},
         {"problems", tables.size()},
         {"mini_batch", first.mini_batch},
         {"exhaustive", CostJson(full_cost)},
         {"pruned", CostJson(pruned_cost)},
         {"runs_saved", 1.0 - static_cast<double>(pruned_cost.runs) / full_cost.runs},
         {"device_time_saved", 1.0 - pruned_cost.device_ms / full_cost.device_ms},
         {"pruned_with_prior", CostJson(prior_cost)},
         {"device_time_saved_with_prior", 1.0 - prior_cost.device_ms / full_cost.device_ms},
         {"plans", plans}});
  }
  return nlohmann::ordered_json{
      {"benchmark", "pruning replay"},
      {"command", "build/bin/ucudnn-bench-engine --replay-pruning --json"},
      {"probe_noise", probe_noise},
      {"pruned_search",
       {{"prune_margin", pruned.prune_margin}, {"skip_factor", pruned.skip_factor}}},
      {"note",
       "the real engine's probe pruning and skipping (BenchmarkOptions defaults) against "
       "--exhaustive, each timed call answered from the measured table (median x (1 + "
       "uniform error within probe_noise)); plans are PlanNetwork per kernel on each search's "
       "replayed tables (predicted), then timed with the table's measured medians (measured): "
       "pruned_vs_exhaustive_measured is what pruning costs the step; pruned_with_prior also "
       "leaves out, from micro-batch 16, what lost on every nearby problem replayed before "
       "(search_prior.h), problems in canonical-key order; gpu_pruned_*: where a NAME-pruned.csv "
       "lies beside NAME-exhaustive.csv (scripts/gpu_search.sh --offline), the plans of the "
       "pruned search as the GPU ran it, timed with the exhaustive table's medians"},
      {"networks", networks}};
}

}  // namespace ucudnn
