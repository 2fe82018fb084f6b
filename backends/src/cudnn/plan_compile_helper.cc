// The compile helper's side of plan_compiler.h: builds the tasks it reads into the compiled-plan
// store, on a cuDNN backend of its own (a handle and a CUDA context on the worker's GPU).
#include <spdlog/spdlog.h>

#include <string>

#include "ucudnn/backends/cudnn_backend.h"
#include "ucudnn/backends/cudnn_engines.h"
#include "ucudnn/backends/plan_compiler.h"
#include "ucudnn/core/engine_config.h"

namespace ucudnn {
namespace {

// One task: the plan built (or loaded: another helper may have been faster) through the store.
Status Compile(CudnnBackend& backend, const std::string& line) {
  UCUDNN_ASSIGN_OR_RETURN(const PlanCompiler::Task task, ParseTaskLine(line));
  UCUDNN_ASSIGN_OR_RETURN(const ConvProblem problem, ParseCanonicalKey(task.problem_key));
  UCUDNN_ASSIGN_OR_RETURN(EngineConfig config, ParseEngineConfigKey(task.config_key));
  config.cudnn_version = static_cast<int32_t>(backend.fingerprint().cudnn_version);
  // The task's beta: a backward filter's accumulating plan (beta 1) is another graph and plan
  // than its overwriting one, stored under its own key.
  const float beta = task.beta == 0 ? 0.0f : 1.0f;
  UCUDNN_ASSIGN_OR_RETURN(std::unique_ptr<ConvGraph> graph,
                          ConvGraph::Build(backend.handle(), problem, task.batch, beta));
  return StoredEnginePlan(backend.handle(), *graph, problem, task.batch, beta, config).status();
}

}  // namespace

int RunPlanCompileHelper(int gpu, const std::string& directory, std::FILE* in, std::FILE* out) {
  if (directory.empty()) {
    spdlog::error("compile helper: no compiled-plan directory to build into");
    return 1;
  }
  Result<std::unique_ptr<CudnnBackend>> backend = CudnnBackend::Create(gpu);
  if (!backend.ok()) {
    spdlog::error("compile helper: GPU {}: {}", gpu, backend.status().ToString());
    return 1;
  }
  SetCompiledPlanDirectory(directory);
  for (std::string line; ReadLine(in, line);) {
    const Status built = Compile(**backend, line);
    const std::string answer = built.ok() ? "ok\n" : "error: " + built.ToString() + "\n";
    if (std::fputs(answer.c_str(), out) == EOF || std::fflush(out) != 0) return 0;  // pool gone
  }
  return 0;
}

}  // namespace ucudnn
