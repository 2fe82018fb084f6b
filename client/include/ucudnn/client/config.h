// Configuration of the ucudnn client library, by code and by environment variables.
//
// Part of the public API (include prefix ucudnn/client/): standard C++ only, no gRPC, protobuf
// or internal types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ucudnn {

struct ClientConfig {
  // Which micro-batch sizes a kernel may be split into (the planner's batch-size policy).
  enum class BatchPolicy {
    kUndivided,   // "undivided": never split; the plan only picks the algorithm
    kPowerOfTwo,  // "power_of_two": 1, 2, 4, ... and the mini-batch itself (default)
    kAll,         // "all": every size (more benchmarking on the cluster)
  };
  // How the workspace limit applies.
  enum class WorkspaceMode {
    // "per_kernel": each call may use the workspace the framework passes it (default).
    kPerKernel,
    // "total_sum": one budget for the whole network, planned together (ILP). The library owns a
    // workspace of workspace_bytes and gives each planned kernel its own slice: right only when
    // kernels run concurrently (several streams), each needing its workspace at the same time.
    kTotalSum,
    // "total" or "total_shared": the planned kernels run one after another and share one
    // library-owned workspace of workspace_bytes (as a framework reusing one buffer does); only
    // safe when the handle's calls run on one stream.
    kTotalShared,
  };

  // Which candidates plans may use.
  enum class Algorithms {
    kAll,      // "all": legacy algorithms and cuDNN graph-API engine configurations (default)
    kLegacy,   // "legacy": the legacy algorithms only
    kEngines,  // "engines": the engine configurations only
  };

  // UCUDNN_DISABLE=1 turns the library off: every call goes to cuDNN unchanged (the framework's
  // own algorithm and workspace), no thread, no network, no cache file.
  bool enabled = true;
  // UCUDNN_SERVER: planner address, host:port. Empty: no server (local cache and fallback only).
  std::string server;
  // UCUDNN_TOKEN: bearer token sent as `authorization` metadata with every call. Contribution
  // needs it (the server's TimingService refuses timings without a configured token).
  std::string token;
  // UCUDNN_TLS=1: talk to the server over TLS (gRPC SSL credentials), verifying its certificate
  // against ca_file, or the system's root certificates when ca_file is empty. Off (default):
  // plaintext, for a cluster-internal network. A token sent in plaintext to a non-loopback
  // address is warned about once.
  bool tls = false;
  // UCUDNN_CA_FILE: PEM file of the root certificates to verify the server with; setting it turns
  // tls on. When it cannot be read the library talks to no server (plans from the local cache
  // only) and says why in the log: it never falls back to plaintext.
  std::string ca_file;
  // UCUDNN_POLICY: undivided | power_of_two | all.
  BatchPolicy policy = BatchPolicy::kPowerOfTwo;
  // UCUDNN_WORKSPACE_MODE: per_kernel | total (= total_shared) | total_shared | total_sum.
  WorkspaceMode workspace_mode = WorkspaceMode::kPerKernel;
  // UCUDNN_ALGORITHMS: all | legacy | engines. Plans for one space alone do not use the local plan
  // cache (its records are for the default).
  Algorithms algorithms = Algorithms::kAll;
  // UCUDNN_WORKSPACE_BYTES ("64MiB", "1.5GiB", "4096").
  //   per_kernel: the workspace the handle's get*WorkspaceSize asks the framework for (at least
  //     what cuDNN needs for the framework's algorithm); 0 leaves those queries to cuDNN alone.
  //     The limit a kernel is planned for is the workspace passed to its first call.
  //   total modes: the network's budget (required; 0 falls back to per_kernel with a warning).
  uint64_t workspace_bytes = 0;
  // UCUDNN_CACHE_PATH: local plan cache file; empty (or "off") for none. FromEnvironment()
  // defaults it to $XDG_CACHE_HOME/ucudnn/plans.bin (or ~/.cache/ucudnn/plans.bin).
  std::string cache_path;
  // UCUDNN_COMPILED_PLAN_CACHE: directory of the cuDNN execution plans of runtime-compiled engines,
  // serialized (ucudnn/core/compiled_plans.h): a plan compiled once on this machine is loaded by
  // every later job instead of compiled again (ConvNeXt-T: 27 plans, 3.6-4.0 s of its first step).
  // Empty (or "off") for none. FromEnvironment() defaults it to $XDG_CACHE_HOME/ucudnn/
  // compiled_plans (or ~/.cache/ucudnn/compiled_plans). Process-wide: the last handle or shape
  // context started sets it.
  std::string compiled_plan_cache;
  // UCUDNN_DEADLINE_MS: deadline of each call to the server, milliseconds.
  int64_t deadline_ms = 2000;
  // UCUDNN_CONTRIBUTE=1: contribution (off by default). When the server reports kernels with
  // missing timings and no live worker serves this device (CatalogService.ListDevices), the
  // library benchmarks those problems on the job's own GPU, with a cuDNN handle and stream of its
  // own on the same device, submits the timings (TimingService.SubmitTimings, with the token)
  // and asks for the plans again. It measures only at explicit quiet points, never during
  // training calls: inside Handle::Prepare(), Handle::WaitForPlans() and Handle::Contribute()
  // (after waiting for the device to be idle). Needs server and token; without a token it warns
  // and stays off.
  bool contribute = false;
  // UCUDNN_FRAMEWORK: the identity of the framework the job runs its own convolutions with
  // ("torch-2.11.0+cu130/benchmark": 1 to 128 bytes of printable ASCII, 0x20-0x7e), sent with
  // every plan request (GetPlanRequest.framework) and part of the local plan cache's keys. With
  // it, the framework's own timings of that identity (submitted by the job, e.g.
  // ucudnnShapeSubmitFrameworkTimings) are planning candidates: a kernel whose plan is the
  // framework's own convolution runs the caller's convolution (UCUDNN_SHAPE_FRAMEWORK; the
  // drop-in handle runs cuDNN's own choice). Empty (default): no framework candidate. An invalid
  // value is refused by ucudnnShapeCreate (UCUDNN_SHAPE_BAD_PARAM) and otherwise logged and
  // treated as empty.
  std::string framework;

  // Code only.
  // UCUDNN_SERVER_WAIT_MS: how long the server may wait for missing benchmarks before answering
  // (GetPlanRequest.max_wait_ms); the deadline must exceed it for that to help.
  uint32_t server_wait_ms = 0;
  // Back-off between attempts for kernels without a plan (server away, timings missing):
  // doubles from the initial value up to the maximum.
  int64_t retry_initial_ms = 500;
  int64_t retry_max_ms = 60000;
  // ... and at most this for kernels whose problems the cluster is benchmarking (the server
  // answered "missing"): their plans are asked for again soon after the worker stores them, so
  // that a job running PyTorch's own meanwhile switches to them within seconds. One small request
  // per job this often while any is missing.
  int64_t missing_retry_max_ms = 5000;
  // Total modes without an explicit Prepare(): the kernels seen are taken to be the whole
  // network once no new kernel appeared for this long, and planned together.
  int64_t collect_quiet_ms = 1000;
  // Distinct kernels tracked (plans and fallback choices); calls of further kernels still run,
  // undivided.
  uint32_t max_kernels = 4096;

  // Defaults overridden by the environment. Invalid values are ignored with a warning in the
  // log: a typo in a variable never stops a training job.
  static ClientConfig FromEnvironment();
  // This configuration overridden by whatever the environment sets.
  ClientConfig WithEnvironment() const;
  // This configuration overridden by `options`: "NAME=value" pairs with the environment
  // variables' names, separated by ';' or newlines ("UCUDNN_SERVER=planner:7000;
  // UCUDNN_WORKSPACE_MODE=total"). Problems are appended to `warnings` when given, else logged.
  ClientConfig WithOptions(std::string_view options,
                           std::vector<std::string>* warnings = nullptr) const;
};

std::string_view ToString(ClientConfig::BatchPolicy policy);
std::string_view ToString(ClientConfig::WorkspaceMode mode);

}  // namespace ucudnn
