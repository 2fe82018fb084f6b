// Runtime-compiled execution plans serialized and loaded back (EnginePlan::Serialize / Load), and
// the shared plans' compiled-plan store: a loaded plan computes what the compiled one does, and
// the store saves, loads, and replaces a damaged file.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "ucudnn/backends/cudnn_engines.h"
#include "ucudnn/backends/plan_compiler.h"
#include "ucudnn/core/engine_config.h"
#include "ucudnn/core/random_fill.h"

namespace ucudnn::gputest {
namespace {

// ConvNeXt's 7x7 depthwise convolution, fp16 channels-last: cuDNN runs it with runtime-compiled
// engines on Hopper.
ConvProblem Depthwise() {
  ConvProblem p = MakeConv(96, 28, 96, 7, 3, 1, /*groups=*/96);
  p.data_type = DataType::kFloat16;
  p.layout = Layout::kNHWC;
  return p;
}
constexpr int64_t kBatch = 8;

class CompiledPlanTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudnnCreate(&handle_), CUDNN_STATUS_SUCCESS);
    const ConvProblem p = Depthwise();
    ConvBackend& b = *gpu();
    const size_t x = kBatch * p.input_bytes_per_sample(), y = kBatch * p.output_bytes_per_sample();
    auto xb = b.Allocate(x), wb = b.Allocate(p.filter_bytes()), yb = b.Allocate(y);
    ASSERT_TRUE(xb.ok() && wb.ok() && yb.ok());
    x_ = std::move(*xb);
    w_ = std::move(*wb);
    y_ = std::move(*yb);
    ASSERT_TRUE(
        FillRandom(b, x_->data(), kBatch * p.input_elements_per_sample(), p.data_type, 7).ok());
    ASSERT_TRUE(FillRandom(b, w_->data(), p.filter_elements(), p.data_type, 8).ok());
    y_bytes_ = y;
  }
  void TearDown() override {
    if (handle_ != nullptr) {
      ForgetSharedEnginePlans(handle_);
      EXPECT_EQ(cudnnDestroy(handle_), CUDNN_STATUS_SUCCESS);
    }
    SetCompiledPlanDirectory("");
  }

  // The first runtime-compiled configuration cuDNN's heuristics propose, or none.
  std::optional<EngineConfig> RuntimeCompiledConfig(const ConvGraph& graph) {
    Result<std::vector<EngineCandidate>> candidates = HeuristicCandidates(graph);
    EXPECT_TRUE(candidates.ok()) << candidates.status().ToString();
    if (!candidates.ok()) return std::nullopt;
    for (const EngineCandidate& c : *candidates) {
      if (c.runtime_compiled) return c.config;
    }
    return std::nullopt;
  }

  // What a store test starts from: the depthwise graph, its first runtime-compiled configuration
  // (for this cuDNN) and an empty directory for the store; none where cuDNN proposes no such
  // configuration (or the graph fails, a failure of the test).
  struct StoreCase {
    std::unique_ptr<ConvGraph> graph;
    EngineConfig config;
    std::filesystem::path dir;
  };
  std::optional<StoreCase> MakeStoreCase(const std::string& name) {
    Result<std::unique_ptr<ConvGraph>> graph = ConvGraph::Build(handle_, Depthwise(), kBatch);
    EXPECT_TRUE(graph.ok()) << graph.status().ToString();
    if (!graph.ok()) return std::nullopt;
    std::optional<EngineConfig> config = RuntimeCompiledConfig(**graph);
    if (!config) return std::nullopt;
    config->cudnn_version = static_cast<int32_t>(cudnnGetVersion());
    StoreCase c{
        std::move(*graph), *config,
        std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()))};
    std::filesystem::remove_all(c.dir);
    return c;
  }

  // The plan's output bytes for the fixture's operands.
  std::vector<char> Run(EnginePlan& plan) {
    void* workspace = nullptr;
    if (plan.workspace_bytes() > 0) {
      EXPECT_EQ(cudaMalloc(&workspace, plan.workspace_bytes()), cudaSuccess);
    }
    EXPECT_EQ(cudaMemset(y_->data(), 0, y_bytes_), cudaSuccess);
    const ConvOperands ops{.x = x_->data(), .w = w_->data(), .y = y_->data()};
    Status ran = plan.Execute(handle_, ops, workspace, plan.workspace_bytes());
    EXPECT_TRUE(ran.ok()) << ran.ToString();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<char> out(y_bytes_);
    EXPECT_EQ(cudaMemcpy(out.data(), y_->data(), y_bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    if (workspace != nullptr) {
      EXPECT_EQ(cudaFree(workspace), cudaSuccess);
    }
    return out;
  }

  cudnnHandle_t handle_ = nullptr;
  std::unique_ptr<BackendBuffer> x_, w_, y_;
  size_t y_bytes_ = 0;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_F(CompiledPlanTest, ALoadedPlanComputesWhatTheCompiledOneDoes) {
  Result<std::unique_ptr<ConvGraph>> graph = ConvGraph::Build(handle_, Depthwise(), kBatch);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  const std::optional<EngineConfig> config = RuntimeCompiledConfig(**graph);
  if (!config) GTEST_SKIP() << "no runtime-compiled engine proposed for the depthwise problem";
  auto start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<EnginePlan>> built = EnginePlan::Build(handle_, **graph, *config);
  const double build_s = SecondsSince(start);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  EXPECT_TRUE((*built)->runtime_compiled());
  Result<std::string> serialized = (*built)->Serialize();
  ASSERT_TRUE(serialized.ok()) << serialized.status().ToString();
  EXPECT_FALSE(serialized->empty());
  start = std::chrono::steady_clock::now();
  Result<std::unique_ptr<EnginePlan>> loaded = EnginePlan::Load(handle_, **graph, *serialized);
  const double load_s = SecondsSince(start);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  std::printf("  engine %d: built in %.3f s, loaded in %.3f s (%zu bytes serialized)\n",
              config->engine, build_s, load_s, serialized->size());
  EXPECT_EQ((*loaded)->workspace_bytes(), (*built)->workspace_bytes());
  const std::vector<char> expected = Run(**built);
  EXPECT_EQ(Run(**loaded), expected) << "the loaded plan computes other bytes";
  // Text that is not a plan is refused by cuDNN, not run.
  EXPECT_FALSE(EnginePlan::Load(handle_, **graph, "{\"not\": \"a plan\"}").ok());
  EXPECT_FALSE(EnginePlan::Load(handle_, **graph, "").ok());
}

TEST_F(CompiledPlanTest, SharedPlansGoThroughTheStore) {
  std::optional<StoreCase> c = MakeStoreCase("ucudnn_compiled_plans");
  if (!c) GTEST_SKIP() << "no runtime-compiled engine proposed for the depthwise problem";
  const std::filesystem::path& dir = c->dir;
  SetCompiledPlanDirectory(dir.string());
  const auto shared = [&] {
    ForgetSharedEnginePlans(handle_);
    Result<std::shared_ptr<EnginePlan>> plan =
        SharedEnginePlan(handle_, Depthwise(), kBatch, 0.0f, c->config);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? *plan : nullptr;
  };
  const CompiledPlanCounts before = GetCompiledPlanCounts();
  std::shared_ptr<EnginePlan> compiled = shared();
  ASSERT_NE(compiled, nullptr);
  CompiledPlanCounts after = GetCompiledPlanCounts();
  EXPECT_EQ(after.saved, before.saved + 1);
  EXPECT_EQ(after.loaded, before.loaded);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u) << "one file per plan, no temporary left behind";
  EXPECT_EQ(files[0].extension(), ".plan");
  const std::vector<char> expected = Run(*compiled);

  std::shared_ptr<EnginePlan> loaded = shared();
  ASSERT_NE(loaded, nullptr);
  EXPECT_NE(loaded.get(), compiled.get());
  EXPECT_EQ(GetCompiledPlanCounts().loaded, after.loaded + 1);
  EXPECT_EQ(Run(*loaded), expected);

  // A damaged file is not used: the plan is compiled again and the file replaced.
  std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) / 2);
  after = GetCompiledPlanCounts();
  std::shared_ptr<EnginePlan> rebuilt = shared();
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_EQ(GetCompiledPlanCounts().loaded, after.loaded);
  EXPECT_EQ(GetCompiledPlanCounts().saved, after.saved + 1);
  EXPECT_EQ(Run(*rebuilt), expected);
  EXPECT_NE(shared(), nullptr);
  EXPECT_EQ(GetCompiledPlanCounts().loaded, after.loaded + 1) << "the replaced file loads";
  std::filesystem::remove_all(dir);
}

TEST_F(CompiledPlanTest, APlanTheWorkerBuiltIsLoadedByTheClientsSharedPlans) {
  // The worker builds on its own handles and graphs (StoredEnginePlan); a job on the same machine
  // then loads that plan for its shared plans instead of compiling it.
  std::optional<StoreCase> c = MakeStoreCase("ucudnn_worker_plans");
  if (!c) GTEST_SKIP() << "no runtime-compiled engine proposed for the depthwise problem";
  const auto worker_plan = [&] {
    return StoredEnginePlan(handle_, *c->graph, Depthwise(), kBatch, 0.0f, c->config);
  };

  // Without a store: built, nothing saved.
  CompiledPlanCounts before = GetCompiledPlanCounts();
  Result<std::unique_ptr<EnginePlan>> unstored = worker_plan();
  ASSERT_TRUE(unstored.ok()) << unstored.status().ToString();
  EXPECT_EQ(GetCompiledPlanCounts().saved, before.saved);

  SetCompiledPlanDirectory(c->dir.string());
  Result<std::unique_ptr<EnginePlan>> worker = worker_plan();
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(GetCompiledPlanCounts().saved, before.saved + 1);
  const std::vector<char> expected = Run(**worker);

  before = GetCompiledPlanCounts();
  ForgetSharedEnginePlans(handle_);
  Result<std::shared_ptr<EnginePlan>> job =
      SharedEnginePlan(handle_, Depthwise(), kBatch, 0.0f, c->config);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(GetCompiledPlanCounts().loaded, before.loaded + 1) << "the job compiled it again";
  EXPECT_EQ(GetCompiledPlanCounts().saved, before.saved);
  EXPECT_EQ(Run(**job), expected);
  std::filesystem::remove_all(c->dir);
}

TEST_F(CompiledPlanTest, ACompileHelperBuildsTheAccumulatingPlanItIsGiven) {
  // A backward filter's later micro-batches accumulate (beta 1): another graph and plan than the
  // overwriting one, which the worker looks up under its own key. A helper given a beta-1 task
  // builds that plan (it once built the beta-0 one instead, and the worker compiled every
  // accumulating plan itself: MobileNetV3-L spent 29 s of its 104 s there on an H200).
  ConvProblem p = Depthwise();
  p.op = ConvOp::kBackwardFilter;
  Result<std::unique_ptr<ConvGraph>> overwriting = ConvGraph::Build(handle_, p, kBatch, 0.0f);
  ASSERT_TRUE(overwriting.ok()) << overwriting.status().ToString();
  std::optional<EngineConfig> config = RuntimeCompiledConfig(**overwriting);
  if (!config) GTEST_SKIP() << "no runtime-compiled engine proposed for the backward filter";
  config->cudnn_version = static_cast<int32_t>(cudnnGetVersion());
  Result<std::unique_ptr<ConvGraph>> accumulating = ConvGraph::Build(handle_, p, kBatch, 1.0f);
  ASSERT_TRUE(accumulating.ok()) << accumulating.status().ToString();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("ucudnn_helper_plans_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);

  std::string lines =
      TaskLine({CanonicalKey(p), kBatch, /*beta=*/1, EngineConfigKey(*config)}) + "\n";
  std::FILE* in = fmemopen(lines.data(), lines.size(), "r");
  std::FILE* out = std::tmpfile();
  ASSERT_TRUE(in != nullptr && out != nullptr);
  EXPECT_EQ(RunPlanCompileHelper(0, dir.string(), in, out), 0);
  std::rewind(out);
  std::string answer;
  ASSERT_TRUE(ReadLine(out, answer));
  std::fclose(in);
  std::fclose(out);
  ASSERT_EQ(answer, "ok");

  // The worker's lookup of the accumulating plan loads what the helper built: nothing compiled.
  SetCompiledPlanDirectory(dir.string());
  const CompiledPlanCounts before = GetCompiledPlanCounts();
  Result<std::unique_ptr<EnginePlan>> plan =
      StoredEnginePlan(handle_, **accumulating, p, kBatch, 1.0f, *config);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(GetCompiledPlanCounts().loaded, before.loaded + 1)
      << "the helper did not build the accumulating plan";
  EXPECT_EQ(GetCompiledPlanCounts().saved, before.saved);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ucudnn::gputest
