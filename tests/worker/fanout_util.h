// Fan-out of a network's benchmark jobs over several workers of one device fingerprint, for the
// integration test and ucudnn-bench-fanout: a backend whose "benchmark" sleeps a fixed time per
// timed call (the scheduling is measured, not a device: simulated workers sharing one GPU would
// not be a speed-up), and a helper that runs N in-process daemons with --once until the queue is
// drained.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ucudnn/backends/backend_factory.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/store/store.h"
#include "ucudnn/worker/daemon.h"

namespace ucudnn::worker::testing {

// The CPU backend's algorithms and fingerprint (under `name`), no real work: operands are a
// dummy buffer, and each timed call sleeps `per_call` and reports that time.
class SleepingBackend : public ConvBackend {
 public:
  SleepingBackend(const std::string& name, std::chrono::microseconds per_call)
      : per_call_(per_call) {
    cpu_ = std::move(MakeBackend("cpu")).value();
    fingerprint_ = cpu_->fingerprint();
    fingerprint_.name = name;
  }
  const DeviceFingerprint& fingerprint() const override { return fingerprint_; }
  std::vector<AlgorithmInfo> Algorithms(ConvOp op) const override { return cpu_->Algorithms(op); }
  Result<size_t> WorkspaceSize(const ConvProblem&, int64_t, const Algorithm&) override {
    return size_t{0};
  }
  Status Run(const ConvProblem&, int64_t, const Algorithm&, const ConvOperands&, void*, size_t,
             float, float) override {
    std::this_thread::sleep_for(per_call_);
    return Status::Ok();
  }
  Status Synchronize() override { return Status::Ok(); }
  Result<std::unique_ptr<BackendBuffer>> Allocate(size_t bytes) override {
    return std::unique_ptr<BackendBuffer>(std::make_unique<DummyBuffer>(bytes));
  }
  Status CopyToDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyToHost(void*, const void*, size_t) override { return Status::Ok(); }
  Status CopyWithinDevice(void*, const void*, size_t) override { return Status::Ok(); }
  Result<std::vector<double>> TimeRuns(const ConvProblem&, int64_t, const Algorithm&,
                                       const ConvOperands&, void*, size_t, int, int runs) override {
    std::this_thread::sleep_for(per_call_);
    return std::vector<double>(static_cast<size_t>(runs), Ms());
  }
  Result<std::vector<double>> TimeRunGroups(const ConvProblem&, int64_t, const Algorithm&,
                                            const ConvOperands&, void*, size_t, int, int samples,
                                            int, bool) override {
    std::this_thread::sleep_for(per_call_);
    return std::vector<double>(static_cast<size_t>(samples), Ms());
  }

 private:
  class DummyBuffer : public BackendBuffer {
   public:
    explicit DummyBuffer(size_t bytes) : bytes_(bytes) {}
    void* data() override { return &byte_; }
    size_t size() const override { return bytes_; }

   private:
    size_t bytes_;
    char byte_ = 0;
  };
  double Ms() const { return std::chrono::duration<double, std::milli>(per_call_).count(); }

  std::unique_ptr<ConvBackend> cpu_;
  DeviceFingerprint fingerprint_;
  std::chrono::microseconds per_call_;
};

struct DrainResult {
  Status status;  // the first daemon error, if any
  double seconds = 0;
  int64_t claimed = 0;
  int64_t completed = 0;
  std::vector<int64_t> completed_per_worker;
};

// Runs `workers` daemons ("fanN:gpu0", one SleepingBackend each, all of fingerprint `name`) with
// `once` against `store` until the queue of that fingerprint is drained.
inline DrainResult DrainWithWorkers(store::Store& store, int workers, const std::string& name,
                                    std::chrono::microseconds per_call, DaemonConfig config) {
  config.once = true;
  std::vector<std::unique_ptr<Daemon>> daemons;
  for (int i = 0; i < workers; ++i) {
    std::vector<BenchmarkDevice> devices;
    devices.emplace_back("gpu0", std::make_unique<SleepingBackend>(name, per_call));
    DaemonConfig c = config;
    c.id_prefix = "fan" + std::to_string(i);
    daemons.push_back(std::make_unique<Daemon>(store, std::move(devices), c));
  }
  std::vector<Status> statuses(daemons.size());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < daemons.size(); ++i) {
    threads.emplace_back([&, i] { statuses[i] = daemons[i]->Run(); });
  }
  for (std::thread& t : threads) t.join();
  DrainResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < daemons.size(); ++i) {
    if (!statuses[i].ok() && result.status.ok()) result.status = statuses[i];
    const DaemonStats s = daemons[i]->stats();
    result.claimed += s.claimed;
    result.completed += s.completed;
    result.completed_per_worker.push_back(s.completed);
  }
  return result;
}

}  // namespace ucudnn::worker::testing
