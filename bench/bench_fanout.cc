// ucudnn-bench-fanout: how a network's benchmark jobs spread over several workers of one device
// fingerprint (issue 40, "fan out"). N = 1, 2, 4 in-process workers drain the same queue (one job
// per unique convolution problem) in a throw-away PostgreSQL; the backend's "benchmark" sleeps a
// fixed time per timed call (tests/worker/fanout_util.h), so what is measured is the queue's
// scheduling, not a device: simulated workers sharing one GPU would be no speed-up. Reports the
// time to drain, the speed-up over one worker, and whether every timing was stored exactly once.
//
//   build/bin/ucudnn-bench-fanout --json > bench/results/cpu/fanout.json
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "support/postgres_fixture.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/store/store.h"
#include "worker/fanout_util.h"

namespace ucudnn {
namespace {

using worker::testing::DrainResult;
using worker::testing::DrainWithWorkers;
using worker::testing::SleepingBackend;

struct Options {
  std::string network = "resnet50";
  int64_t batch = 32;
  int per_call_us = 2000;
  std::vector<int> workers = {1, 2, 4};
  bool json = false;
};

// Whether every job's table is stored exactly once: each (size, algorithm) one row, measured by
// the worker that holds the done job.
Result<bool> EveryTimingOnce(store::Store& store, const DeviceFingerprint& device,
                             const std::vector<std::pair<int64_t, ConvProblem>>& jobs,
                             ConvBackend& backend, int64_t batch) {
  for (const auto& [id, problem] : jobs) {
    UCUDNN_ASSIGN_OR_RETURN(store::Job job, store.GetJob(id));
    if (job.state != store::JobState::kDone || job.attempts != 1) return false;
    UCUDNN_ASSIGN_OR_RETURN(std::vector<store::TimingRecord> records,
                            store.GetTimingRecords(device, problem));
    std::set<std::tuple<int64_t, int, std::string>> keys;
    for (const store::TimingRecord& r : records) {
      if (r.measured_by != job.worker_id) return false;
      keys.insert({r.timing.micro_batch, r.timing.algo, r.timing.engine_config});
    }
    const size_t expected = MicroBatchSizes(BatchPolicy::kPowerOfTwo, batch).size() *
                            backend.Algorithms(problem.op).size();
    if (records.size() != expected || keys.size() != expected) return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  CLI::App app("ucudnn-bench-fanout: a network's benchmark queue drained by 1, 2, 4 workers");
  app.add_option("--network", o.network, "network whose unique problems are queued")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "mini-batch (jobs measure power-of-two sizes up to it)")
      ->capture_default_str();
  app.add_option("--per-call-us", o.per_call_us, "sleep of each timed call of the fake backend")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "worker counts to compare")->capture_default_str();
  app.add_flag("--json", o.json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto kernels = NetworkKernels(o.network, o.batch);
  if (!kernels.ok()) {
    std::fprintf(stderr, "%s\n", kernels.status().ToString().c_str());
    return 2;
  }
  const std::vector<Kernel> unique = UniqueKernels(*kernels);
  auto postgres = test_support::PostgresServer::Launch();
  if (!postgres.ok()) {
    std::fprintf(stderr, "cannot start PostgreSQL: %s\n", postgres.status().ToString().c_str());
    return 1;
  }
  const std::string device_name = "fan-out bench device";
  const std::chrono::microseconds per_call(o.per_call_us);
  SleepingBackend reference(device_name, per_call);

  nlohmann::json runs = nlohmann::json::array();
  double one_worker_s = 0;
  bool all_once = true;
  for (int workers : o.workers) {
    auto url = (*postgres)->CreateDatabase("fanout_" + std::to_string(workers));
    if (!url.ok()) {
      std::fprintf(stderr, "%s\n", url.status().ToString().c_str());
      return 1;
    }
    auto store = store::Store::Open(*url);
    if (!store.ok() || !(*store)->Migrate().ok()) {
      std::fprintf(stderr, "cannot open and migrate the database\n");
      return 1;
    }
    std::vector<std::pair<int64_t, ConvProblem>> jobs;
    for (const Kernel& k : unique) {
      auto enqueued = (*store)->EnqueueJob(reference.fingerprint(), k.problem, o.batch,
                                           BatchPolicy::kPowerOfTwo);
      if (!enqueued.ok()) {
        std::fprintf(stderr, "%s\n", enqueued.status().ToString().c_str());
        return 1;
      }
      jobs.push_back({enqueued->job_id, k.problem});
    }
    worker::DaemonConfig config;
    config.host = "bench";
    config.id_prefix = "fan";
    config.poll = std::chrono::milliseconds(50);
    config.lease = std::chrono::milliseconds(30000);
    config.benchmark.warmup_runs = 1;
    config.benchmark.min_runs = 1;
    config.benchmark.max_runs = 1;
    config.benchmark.prune_margin = -1;  // one timed call per configuration: a fixed cost
    const DrainResult drained = DrainWithWorkers(**store, workers, device_name, per_call, config);
    if (!drained.status.ok()) {
      std::fprintf(stderr, "%s\n", drained.status.ToString().c_str());
      return 1;
    }
    auto once = EveryTimingOnce(**store, reference.fingerprint(), jobs, reference, o.batch);
    const bool exactly_once = once.ok() && *once;
    all_once = all_once && exactly_once;
    if (workers == o.workers.front()) one_worker_s = drained.seconds * o.workers.front();
    runs.push_back({{"workers", workers},
                    {"jobs", jobs.size()},
                    {"seconds_to_drain", drained.seconds},
                    {"speedup_vs_one", one_worker_s / drained.seconds},
                    {"jobs_per_worker", drained.completed_per_worker},
                    {"every_timing_stored_once", exactly_once}});
    if (!o.json) {
      std::printf("%d worker(s): %zu jobs in %.2f s (x%.2f), timings once: %s\n", workers,
                  jobs.size(), drained.seconds, one_worker_s / drained.seconds,
                  exactly_once ? "yes" : "NO");
    }
  }
  if (o.json) {
    const nlohmann::json out = {
        {"benchmark", "fanout"},
        {"command", "build/bin/ucudnn-bench-fanout --json"},
        {"network", o.network},
        {"batch", o.batch},
        {"per_call_us", o.per_call_us},
        {"note",
         "fake backend sleeping per timed call: the queue's scheduling, not GPU time; "
         "speedup_vs_one assumes the first run used the first worker count"},
        {"runs", runs}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return all_once ? 0 : 1;
}

}  // namespace
}  // namespace ucudnn

int main(int argc, char** argv) { return ucudnn::Main(argc, argv); }
