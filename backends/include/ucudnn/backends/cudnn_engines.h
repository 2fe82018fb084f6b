// cuDNN's graph API (the backend API of cudnn_graph.h) for one convolution: the operation graph
// of a problem at a micro-batch size, the engine configurations cuDNN proposes for it, and
// execution plans built from an EngineConfig identity. This is the candidate space PyTorch and
// cudnn-frontend search; on Hopper several of its engines are fast with little workspace.
// Part of the cuDNN backend library (ucudnn_cudnn); the client binds plans with it.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/backends/plan_compiler.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// cuDNN's data type of the model's (the legacy descriptors and the graph's tensors alike).
Result<cudnnDataType_t> CudnnDataTypeOf(DataType t);

// One backend descriptor, destroyed with the object.
class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  static Result<BackendDescriptor> Create(cudnnBackendDescriptorType_t type);
  BackendDescriptor(BackendDescriptor&& other) noexcept : desc_(other.desc_) {
    other.desc_ = nullptr;
  }
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  ~BackendDescriptor();
  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// The byte alignment declared for the batch-strided tensors of `problem`: every micro-batch
// starts a whole number of samples into the caller's tensor, so the declared alignment may not
// exceed the largest power of two dividing one sample's bytes (nor 16, cuDNN's widest). The
// filter is always whole and gets 16. A pointer less aligned than declared is refused at run time.
int64_t SampleAlignment(const ConvProblem& problem);

// The convolution of `problem` at micro-batch `batch` as a one-operation graph, with alpha = 1
// and the given beta (0: overwrite, 1: accumulate, as backward-filter's later micro-batches do),
// on `handle`'s device. `dynamic_shape` declares it a graph of dynamic shape
// (CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, cuDNN 9.4 and later): what lets a kernel
// cache (EnginePlan::Build) give a runtime-compiled engine's kernel to the same graph at other
// sizes.
class ConvGraph {
 public:
  static Result<std::unique_ptr<ConvGraph>> Build(cudnnHandle_t handle, const ConvProblem& problem,
                                                  int64_t batch, float beta = 0.0f,
                                                  bool dynamic_shape = false);
  cudnnBackendDescriptor_t graph() const { return graph_.get(); }
  // The handle the graph was built on: plans of the graph are built and run on it.
  cudnnHandle_t handle() const { return handle_; }
  const ConvProblem& problem() const { return problem_; }
  int64_t batch() const { return batch_; }
  float beta() const { return beta_; }
  int64_t alignment() const { return alignment_; }
  bool dynamic_shape() const { return dynamic_shape_; }

 private:
  ConvGraph() = default;
  cudnnHandle_t handle_ = nullptr;
  ConvProblem problem_;
  int64_t batch_ = 0;
  float beta_ = 0;
  bool dynamic_shape_ = false;
  int64_t alignment_ = 16;
  BackendDescriptor x_, w_, y_, conv_, op_, graph_;
};

// One engine configuration cuDNN proposes, with what its notes say.
struct EngineCandidate {
  EngineConfig config;
  bool tensor_core = false;       // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
  bool down_converts = false;     // CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
  bool nondeterministic = false;  // CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  bool runtime_compiled = false;  // CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION
  std::string sources;            // heuristic modes that proposed it: "i" instant, "b", "f"
};

// Which engine configurations are candidates for `problem`'s math mode, as PyTorch filters them:
// never one that down-converts its inputs (fp32 data computed in fp16) unless the mode allows
// conversion; in fma mode (strict fp32, PyTorch with TF32 off) never a tensor-core one.
bool AdmittedByMath(const EngineCandidate& candidate, const ConvProblem& problem);

// The engine configurations cuDNN's heuristics propose for `graph`: every result of mode INSTANT
// and of the fallback list, deduplicated (first proposer wins the order), filtered
// by AdmittedByMath. The cuDNN version is set from cudnnGetVersion().
Result<std::vector<EngineCandidate>> HeuristicCandidates(const ConvGraph& graph);

// Every engine the graph supports with every knob combination its knob infos allow, capped at
// `max_per_engine` combinations per engine (enumerated from each knob's minimum upward): the
// exhaustive space, for comparison with the heuristics' candidates.
Result<std::vector<EngineCandidate>> ExhaustiveCandidates(const ConvGraph& graph,
                                                          size_t max_per_engine);

// An execution plan of one engine configuration on a graph.
class EnginePlan {
 public:
  // kUnsupported with cuDNN's status when this cuDNN cannot build the configuration for the graph
  // (another version's identity, a shape the engine does not take). With `kernel_cache` (a
  // finalized CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR, for a dynamic-shape graph), a
  // runtime-compiled engine's kernel is taken from it when it holds one and left there when
  // compiled. No plan of the planner uses one: on cuDNN 9.19 its backward-filter plans computed
  // wrong results at other sizes and its forward plans failed to build (ucudnn-engine-probe
  // --kernel-cache, docs/engines.md); the worker's compile helpers (plan_compiler.h) build each
  // size's plan instead.
  static Result<std::unique_ptr<EnginePlan>> Build(cudnnHandle_t handle, const ConvGraph& graph,
                                                   const EngineConfig& config,
                                                   cudnnBackendDescriptor_t kernel_cache = nullptr);
  // A plan from Serialize()'s text, without compiling: the caller vouches that it is a plan of
  // `graph` built on the same GPU model and cuDNN version (the compiled-plan store's key). cuDNN
  // refuses text it cannot take (kUnsupported or kInvalidArgument with its status).
  static Result<std::unique_ptr<EnginePlan>> Load(cudnnHandle_t handle, const ConvGraph& graph,
                                                  std::string_view serialized);
  // cuDNN's serialized form (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, which cuDNN gives for
  // runtime-compiled engines); kUnsupported (or cuDNN's status) for a plan it does not serialize.
  Result<std::string> Serialize() const;
  // Whether the engine compiles its kernel when the plan is built
  // (CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION): what a serialized plan saves.
  bool runtime_compiled() const { return runtime_compiled_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The handle the plan was built on (the graph's).
  cudnnHandle_t handle() const { return handle_; }
  int64_t alignment() const { return alignment_; }
  ConvOp op() const { return op_; }
  cudnnBackendDescriptor_t plan() const { return plan_.get(); }
  // Runs on `handle`'s stream. The operands are the op's (see ConvOperands); each pointer must be
  // aligned as the graph declared, else kUnsupported (the caller falls back).
  Status Execute(cudnnHandle_t handle, const ConvOperands& operands, void* workspace,
                 size_t workspace_bytes);

 private:
  EnginePlan() = default;
  Status ReadWorkspace();  // workspace_bytes_ from the finalized plan
  cudnnHandle_t handle_ = nullptr;
  bool runtime_compiled_ = false;
  ConvOp op_ = ConvOp::kForward;
  int64_t alignment_ = 16;
  size_t workspace_bytes_ = 0;
  BackendDescriptor engine_, config_, plan_;
  std::vector<BackendDescriptor> knob_choices_;
};

// Execution plans shared by everything in the process that runs on one handle: the client's
// backend (a plan's workspace query and first, checked run) and its bound plans (the later runs)
// then build each (problem, size, beta, configuration) once. Building a runtime-compiled engine
// compiles it (0.3-1 s), again for every build of the same plan: ConvNeXt-T's depthwise plans
// were built 2-4 times each in a job's first step. The graph is built here and lives with its
// plan. Thread-safe; bounded (the oldest entries leave first; a plan in use stays alive with its
// holders). kUnsupported as EnginePlan::Build; failures are not remembered.
Result<std::shared_ptr<EnginePlan>> SharedEnginePlan(cudnnHandle_t handle,
                                                     const ConvProblem& problem, int64_t batch,
                                                     float beta, const EngineConfig& config);
// EnginePlan::Build of `graph` (built for problem, batch and beta) through the compiled-plan store
// below: loaded when the store holds the plan for this GPU model and cuDNN version, else built,
// and saved there when runtime-compiled. For plans outside the shared ones (the worker's, on its
// own handles), so that a worker on a training machine leaves the runtime-compiled plans it
// timed for the machine's jobs. EnginePlan::Build without a store.
Result<std::unique_ptr<EnginePlan>> StoredEnginePlan(cudnnHandle_t handle, const ConvGraph& graph,
                                                     const ConvProblem& problem, int64_t batch,
                                                     float beta, const EngineConfig& config);
// The compiled-plan store of the shared plans (ucudnn/core/compiled_plans.h), process-wide like
// them: a shared plan of a runtime-compiled engine is loaded from `directory` when it holds one
// for this GPU model and cuDNN version, and saved there after it was built. Empty: none (the
// default). The client sets it from ClientConfig::compiled_plan_cache when a handle or shape
// context starts, the worker from --compiled-plan-cache; the last one set wins.
void SetCompiledPlanDirectory(const std::string& directory);
// Process-wide too: a runtime-compiled plan that StoredEnginePlan or SharedEnginePlan does not
// find in the store is first awaited from `compiler` (which builds it in another process into the
// store) and loaded, and built here only when it is still not there. Null: none (the default;
// the client's). CudnnBackend::Prepare queues a problem's plans with it.
void SetPlanCompiler(std::shared_ptr<PlanCompiler> compiler);
std::shared_ptr<PlanCompiler> GetPlanCompiler();
// What the store did in this process.
struct CompiledPlanCounts {
  uint64_t loaded = 0;         // plans loaded instead of compiled
  uint64_t saved = 0;          // runtime-compiled plans built here and saved
  uint64_t save_failures = 0;  // of those built, not saved (cuDNN did not serialize, disk)
};
CompiledPlanCounts GetCompiledPlanCounts();

// Drops the shared plans of `handle`; called before the handle is destroyed (a new handle may
// get its address).
void ForgetSharedEnginePlans(cudnnHandle_t handle);

}  // namespace ucudnn
