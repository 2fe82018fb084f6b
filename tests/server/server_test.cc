// The planner server end to end: a real gRPC server on an ephemeral loopback port, real clients,
// a throw-away PostgreSQL. Timings are the measured H100 ResNet-50 tables (data/h100/).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/message_differencer.h>
#include <atomic>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <pqxx/pqxx>

#include "grpc/health/v1/health.grpc.pb.h"
#include "support/bearer_channel.h"
#include "support/devices.h"
#include "support/postgres_fixture.h"
#include "ucudnn/core/dp.h"
#include "ucudnn/core/networks.h"
#include "ucudnn/core/timing_csv.h"
#include "ucudnn/metrics/registry.h"
#include "ucudnn/planner/planner.h"
#include "ucudnn/proto/grpc_status.h"
#include "ucudnn/proto/proto_convert.h"
#include "ucudnn/server/server.h"
#include "ucudnn/server/server_metrics.h"
#include "ucudnn/store/store.h"
#include "ucudnn/v1/ucudnn.grpc.pb.h"

namespace ucudnn::server {
namespace {

using namespace std::chrono_literals;
using google::protobuf::util::MessageDifferencer;
using test_support::H100;

constexpr const char* kToken = "s3cret-token";
constexpr int64_t kMiniBatch = 256;

const TimingTables& H100Fp32Tables() {
  static const TimingTables tables = [] {
    auto read = ReadTimingCsvFile(std::string(UCUDNN_SOURCE_DIR) +
                                  "/data/h100/h100-cudnn91400-resnet50-fp32-nchw.csv");
    EXPECT_TRUE(read.ok()) << read.status().ToString();
    return read.ok() ? *read : TimingTables{};
  }();
  return tables;
}

std::vector<Kernel> ResNet50Kernels() {
  auto kernels = NetworkKernels("resnet50", kMiniBatch);
  EXPECT_TRUE(kernels.ok()) << kernels.status().ToString();
  return kernels.ok() ? *kernels : std::vector<Kernel>{};
}

// Writes the measured tables of the problems `keep` accepts.
void Seed(const std::string& url, const std::function<bool(const ConvProblem&)>& keep) {
  auto store = store::Store::Open(url);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Migrate().ok());
  std::vector<store::ProblemTimings> problems;
  for (const auto& [key, t] : H100Fp32Tables()) {
    if (keep(t.problem)) problems.push_back({t.problem, t.table.entries});
  }
  ASSERT_FALSE(problems.empty());
  auto written = (*store)->ImportTimings(H100(), problems, "import:test");
  ASSERT_TRUE(written.ok()) << written.status().ToString();
}

v1::GetPlanRequest PlanRequestFor(const std::vector<Kernel>& kernels, uint32_t max_wait_ms = 0,
                                  WorkspaceMode mode = WorkspaceMode::kPerKernel) {
  PlanRequest request;
  request.device = H100();
  request.kernels = kernels;
  request.policy = BatchPolicy::kPowerOfTwo;
  request.workspace_mode = mode;
  request.workspace_bytes = 64ull << 20;
  return ToProto(request, max_wait_ms);
}

// What the planner answers for the same request straight from the CSV tables.
v1::Plan ExpectedPlan(const v1::GetPlanRequest& message) {
  auto request = FromProto(message);
  EXPECT_TRUE(request.ok());
  std::vector<const TimingTable*> tables;
  for (const auto& kernel : request->kernels) {
    tables.push_back(FindTimings(H100Fp32Tables(), kernel.problem));
  }
  auto plan = PlanNetwork(*request, tables);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return ToProto(*plan, request->device);
}

// Fields that legitimately differ between two computations of one plan.
v1::Plan Comparable(v1::Plan plan) {
  plan.clear_plan_hash();
  plan.mutable_ilp()->set_solve_seconds(0);
  return plan;
}

std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout = 60s) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

// A running server with clients of every service. Their calls carry the admin token (servers
// refuse writes to callers without one) unless they set their own; the anonymous_ stubs send none.
struct TestServer {
  std::unique_ptr<PlannerServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::PlannerService::Stub> planner;
  std::unique_ptr<v1::CatalogService::Stub> catalog;
  std::unique_ptr<v1::TimingService::Stub> timings;
  std::unique_ptr<v1::PlannerService::Stub> anonymous_planner;
  std::unique_ptr<v1::CatalogService::Stub> anonymous_catalog;
  std::unique_ptr<v1::TimingService::Stub> anonymous_timings;

  Result<v1::GetPlanResponse> GetPlan(const v1::GetPlanRequest& request,
                                      std::chrono::milliseconds timeout = 60s) {
    auto context = Context(timeout);
    v1::GetPlanResponse response;
    const grpc::Status status = planner->GetPlan(context.get(), request, &response);
    if (!status.ok()) return FromGrpc(status);
    return response;
  }

  // Without a token when `token` is empty.
  grpc::Status Submit(const ConvProblem& problem, const std::vector<Timing>& measured,
                      const std::string& token = kToken) {
    auto context = Context();
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    v1::TimingService::Stub& stub = token.empty() ? *anonymous_timings : *timings;
    v1::SubmitTimingsRequest request;
    *request.mutable_device() = ToProto(H100());
    *request.mutable_problem() = ToProto(problem);
    for (const auto& t : measured) *request.add_timings() = ToProto(t);
    request.set_measured_by("test-submitter");
    v1::SubmitTimingsResponse response;
    return stub.SubmitTimings(context.get(), request, &response);
  }

  std::vector<v1::Job> Jobs() {
    auto context = Context();
    v1::ListJobsRequest request;
    request.set_limit(10000);
    v1::ListJobsResponse response;
    EXPECT_TRUE(catalog->ListJobs(context.get(), request, &response).ok());
    return {response.jobs().begin(), response.jobs().end()};
  }
};

ServerConfig BaseConfig(const std::string& url) {
  ServerConfig config;
  config.database_url = url;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.tokens = {kToken};
  config.health_interval_ms = 100;
  return config;
}

TestServer Launch(const ServerConfig& config) {
  TestServer t;
  auto started = PlannerServer::Start(config);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  if (!started.ok()) return t;
  t.server = std::move(started).value();
  const std::string target = "127.0.0.1:" + std::to_string(t.server->port());
  t.channel = test_support::ChannelWithToken(target, kToken);
  t.planner = v1::PlannerService::NewStub(t.channel);
  t.catalog = v1::CatalogService::NewStub(t.channel);
  t.timings = v1::TimingService::NewStub(t.channel);
  const auto anonymous = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  t.anonymous_planner = v1::PlannerService::NewStub(anonymous);
  t.anonymous_catalog = v1::CatalogService::NewStub(anonymous);
  t.anonymous_timings = v1::TimingService::NewStub(anonymous);
  return t;
}

// The measured table of `problem`, as the worker would submit it.
std::vector<Timing> MeasuredTimings(const ConvProblem& problem) {
  const TimingTable* table = FindTimings(H100Fp32Tables(), problem);
  EXPECT_NE(table, nullptr) << CanonicalKey(problem);
  return table ? table->entries : std::vector<Timing>{};
}

class ServerTest : public test_support::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_FALSE(H100Fp32Tables().empty());
  }
};

// ---- Planning ---------------------------------------------------------------------------------

TEST_F(ServerTest, CompletePlanEqualsThePlannersAnswer) {
  Seed(url(), [](const ConvProblem&) { return true; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const auto request = PlanRequestFor(ResNet50Kernels());
  ASSERT_EQ(request.kernels_size(), 159);

  auto response = t.GetPlan(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  const v1::Plan& plan = response->plan();
  EXPECT_EQ(plan.status(), v1::PLAN_STATUS_COMPLETE);
  EXPECT_EQ(plan.missing_size(), 0);
  EXPECT_FALSE(response->from_cache());
  EXPECT_EQ(plan.plan_hash().size(), 16u);
  EXPECT_GT(plan.total_undivided_ms(), plan.total_time_ms());  // micro-batching pays off
  std::string difference;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(Comparable(ExpectedPlan(request)), Comparable(plan)))
      << difference;
  EXPECT_TRUE(t.Jobs().empty());  // nothing was missing, nothing enqueued
}

TEST_F(ServerTest, NetworkWideIlpPlanEqualsThePlannersAnswer) {
  Seed(url(), [](const ConvProblem&) { return true; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  std::vector<Kernel> kernels = ResNet50Kernels();
  kernels.resize(30);
  const auto request = PlanRequestFor(kernels, 0, WorkspaceMode::kTotalSum);
  auto response = t.GetPlan(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_TRUE(response->plan().ilp().used());
  EXPECT_EQ(response->plan().ilp().status(), "optimal");
  EXPECT_LE(response->plan().total_workspace_bytes(), 64ull << 20);
  std::string difference;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(Comparable(ExpectedPlan(request)), Comparable(response->plan())))
      << difference;
}

TEST_F(ServerTest, MissingTimingsEnqueueOneJobPerProblemAndAnswerPartial) {
  // Forward timings only: every backward problem is missing.
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const auto request = PlanRequestFor(ResNet50Kernels());
  std::set<std::string> missing_keys;
  for (const auto& k : ResNet50Kernels()) {
    if (k.problem.op != ConvOp::kForward) missing_keys.insert(CanonicalKey(k.problem));
  }

  auto first = t.GetPlan(request);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const v1::Plan& plan = first->plan();
  EXPECT_EQ(plan.status(), v1::PLAN_STATUS_PARTIAL);
  ASSERT_EQ(plan.missing_size(), static_cast<int>(missing_keys.size()));
  std::map<std::string, int64_t> job_of_problem;
  for (const auto& missing : plan.missing()) {
    auto problem = FromProto(missing.problem());
    ASSERT_TRUE(problem.ok());
    EXPECT_EQ(missing_keys.count(CanonicalKey(*problem)), 1u);
    EXPECT_EQ(missing.problem_hash(), HashHex(StableHash(*problem)));
    EXPECT_EQ(missing.max_micro_batch(), kMiniBatch);
    EXPECT_GT(missing.job_id(), 0);
    EXPECT_EQ(missing.job_state(), "queued");
    job_of_problem[missing.problem_hash()] = missing.job_id();
  }
  for (const auto& kernel : plan.kernels()) {
    const bool forward = kernel.kernel().problem().op() == v1::CONV_OP_FORWARD;
    EXPECT_EQ(kernel.status(),
              forward ? v1::KERNEL_PLAN_STATUS_PLANNED : v1::KERNEL_PLAN_STATUS_MISSING);
  }

  // Asking again enqueues nothing new: the same jobs are reported.
  auto second = t.GetPlan(request);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->from_cache());  // partial plans are never cached
  for (const auto& missing : second->plan().missing()) {
    EXPECT_EQ(missing.job_id(), job_of_problem[missing.problem_hash()]);
  }
  const auto jobs = t.Jobs();
  EXPECT_EQ(jobs.size(), missing_keys.size());
  for (const auto& job : jobs) {
    EXPECT_EQ(job.state(), "queued");
    EXPECT_EQ(job.device_hash(), HashHex(H100().Hash()));
    EXPECT_EQ(job.policy(), v1::BATCH_POLICY_POWER_OF_TWO);
  }
}

TEST_F(ServerTest, ConcurrentIdenticalRequestsMakeExactlyOneJobPerProblem) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  std::vector<Kernel> kernels = ResNet50Kernels();
  kernels.resize(12);  // 4 layers x 3 ops
  std::set<uint64_t> problems;
  for (const auto& k : kernels) problems.insert(StableHash(k.problem));
  const auto request = PlanRequestFor(kernels);

  constexpr int kThreads = 50;
  std::vector<std::thread> threads;
  std::vector<std::set<int64_t>> job_ids(kThreads);
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto response = t.GetPlan(request);
      if (!response.ok()) {
        ++failures;
        return;
      }
      for (const auto& m : response->plan().missing()) job_ids[i].insert(m.job_id());
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  const auto jobs = t.Jobs();
  EXPECT_EQ(jobs.size(), problems.size());
  for (int i = 1; i < kThreads; ++i) EXPECT_EQ(job_ids[i], job_ids[0]);
  EXPECT_EQ(job_ids[0].size(), problems.size());
}

TEST_F(ServerTest, InvalidRequestsNameTheFieldAndWriteNothing) {
  ServerConfig config = BaseConfig(url());
  config.max_kernels = 64;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  const auto valid = PlanRequestFor({ResNet50Kernels()[0], ResNet50Kernels()[1]});
  struct Case {
    std::string expected_field;
    std::function<void(v1::GetPlanRequest&)> break_it;
  };
  const std::vector<Case> cases = {
      {"device: required", [](auto& r) { r.clear_device(); }},
      {"device.backend", [](auto& r) { r.mutable_device()->set_backend("tpu"); }},
      {"device.name", [](auto& r) { r.mutable_device()->set_name(""); }},
      {"kernels: at least 1", [](auto& r) { r.clear_kernels(); }},
      {"kernels: at most 64",
       [](auto& r) {
         while (r.kernels_size() <= 64) *r.add_kernels() = r.kernels(0);
       }},
      {"kernels[1].problem.c", [](auto& r) { r.mutable_kernels(1)->mutable_problem()->set_c(0); }},
      {"kernels[0].problem.k",
       [](auto& r) { r.mutable_kernels(0)->mutable_problem()->set_k(1 << 20); }},
      {"kernels[1].problem.op",
       [](auto& r) { r.mutable_kernels(1)->mutable_problem()->set_op(v1::CONV_OP_UNSPECIFIED); }},
      {"kernels[0].problem.groups",
       [](auto& r) { r.mutable_kernels(0)->mutable_problem()->set_groups(7); }},
      {"kernels[0].problem.pad_h",
       [](auto& r) { r.mutable_kernels(0)->mutable_problem()->set_pad_h(-1); }},
      {"kernels[1].problem: required", [](auto& r) { r.mutable_kernels(1)->clear_problem(); }},
      {"kernels[0].mini_batch", [](auto& r) { r.mutable_kernels(0)->set_mini_batch(0); }},
      {"kernels[1].name", [](auto& r) { r.mutable_kernels(1)->set_name(std::string(200, 'x')); }},
      {"policy", [](auto& r) { r.set_policy(static_cast<v1::BatchPolicy>(42)); }},
      {"workspace_mode", [](auto& r) { r.set_workspace_mode(static_cast<v1::WorkspaceMode>(9)); }},
      {"workspace_bytes", [](auto& r) { r.set_workspace_bytes((uint64_t{1} << 40) + 1); }},
      {"max_wait_ms", [](auto& r) { r.set_max_wait_ms(600001); }},
  };
  for (const auto& c : cases) {
    v1::GetPlanRequest request = valid;
    c.break_it(request);
    auto response = t.GetPlan(request);
    ASSERT_FALSE(response.ok()) << c.expected_field;
    EXPECT_EQ(response.status().code(), StatusCode::kInvalidArgument) << c.expected_field;
    EXPECT_NE(response.status().message().find(c.expected_field), std::string::npos)
        << "expected '" << c.expected_field << "' in: " << response.status().message();

    // StreamPlan and ExplainPlan validate the same way, under "request.".
    v1::StreamPlanRequest stream_request;
    *stream_request.mutable_request() = request;
    auto context = Context();
    auto reader = t.planner->StreamPlan(context.get(), stream_request);
    v1::StreamPlanResponse ignored;
    while (reader->Read(&ignored)) {
    }
    const grpc::Status stream_status = reader->Finish();
    EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(stream_status.error_message().find("request." + c.expected_field), std::string::npos)
        << stream_status.error_message();
  }
  // Nothing was written: no device row, no job.
  auto context = Context();
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(t.catalog->ListDevices(context.get(), {}, &devices).ok());
  EXPECT_EQ(devices.devices_size(), 0);
  EXPECT_TRUE(t.Jobs().empty());
}

TEST_F(ServerTest, SeveralInvalidFieldsAreAllNamedInOneError) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  v1::GetPlanRequest request = PlanRequestFor({ResNet50Kernels()[0], ResNet50Kernels()[1]});
  request.mutable_device()->set_backend("tpu");
  request.mutable_kernels(0)->mutable_problem()->set_c(0);
  request.mutable_kernels(1)->set_mini_batch(-1);
  request.set_max_wait_ms(600001);
  const std::vector<std::string> fields = {"device.backend", "kernels[0].problem.c",
                                           "kernels[1].mini_batch", "max_wait_ms"};
  auto response = t.GetPlan(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = response.status().message();
  EXPECT_EQ(message.rfind("4 invalid fields: device.backend: ", 0), 0u) << message;
  for (const auto& field : fields) {
    EXPECT_NE(message.find(field + ":"), std::string::npos) << field << " in " << message;
  }
  EXPECT_EQ(t.GetPlan(request).status().message(), message);  // deterministic

  // StreamPlan and ExplainPlan name the same fields under "request.".
  v1::StreamPlanRequest stream_request;
  *stream_request.mutable_request() = request;
  auto context = Context();
  auto reader = t.planner->StreamPlan(context.get(), stream_request);
  v1::StreamPlanResponse ignored;
  while (reader->Read(&ignored)) {
  }
  const grpc::Status streamed = reader->Finish();
  EXPECT_EQ(streamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ExplainPlanRequest explain_request;
  *explain_request.mutable_request() = request;
  v1::ExplainPlanResponse explained;
  auto explain_context = Context();
  const grpc::Status explain =
      t.catalog->ExplainPlan(explain_context.get(), explain_request, &explained);
  EXPECT_EQ(explain.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const auto& field : fields) {
    EXPECT_NE(streamed.error_message().find("request." + field + ":"), std::string::npos)
        << streamed.error_message();
    EXPECT_NE(explain.error_message().find("request." + field + ":"), std::string::npos)
        << explain.error_message();
  }

  // SubmitTimings too: the device, the problem and two timings at once.
  auto submit_context = Context();
  submit_context->AddMetadata("authorization", std::string("Bearer ") + kToken);
  v1::SubmitTimingsRequest submit;
  v1::DeviceFingerprint device = ToProto(H100());
  device.set_name("");
  *submit.mutable_device() = device;
  ConvProblem problem = ResNet50Kernels()[0].problem;
  problem.k = 0;
  *submit.mutable_problem() = ToProto(problem);
  for (const auto& timing : MeasuredTimings(ResNet50Kernels()[0].problem)) {
    *submit.add_timings() = ToProto(timing);
  }
  submit.mutable_timings(0)->set_time_ms(-1);
  submit.mutable_timings(2)->set_algo(-4);
  v1::SubmitTimingsResponse submitted;
  const grpc::Status refused = t.timings->SubmitTimings(submit_context.get(), submit, &submitted);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(
      refused.error_message().rfind("4 invalid fields: device.name: required; problem.k: ", 0), 0u)
      << refused.error_message();
  for (const char* field : {"timings[0].time_ms:", "timings[2].algo:"}) {
    EXPECT_NE(refused.error_message().find(field), std::string::npos) << refused.error_message();
  }
  EXPECT_TRUE(t.Jobs().empty());
}

TEST_F(ServerTest, RequestsOverTheMessageLimitAreRefused) {
  ServerConfig config = BaseConfig(url());
  config.max_message_bytes = 64 << 10;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  auto request = PlanRequestFor(ResNet50Kernels());
  for (int i = 0; i < 5; ++i) {  // ~5000 kernels, well over 64 KiB
    const auto copy = request;
    request.MergeFrom(copy);
  }
  auto response = t.GetPlan(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(ServerTest, SecondRequestIsServedFromCacheAlsoByAnotherReplica) {
  Seed(url(), [](const ConvProblem&) { return true; });
  TestServer a = Launch(BaseConfig(url()));
  TestServer b = Launch(BaseConfig(url()));
  ASSERT_TRUE(a.server && b.server);
  const auto request = PlanRequestFor(ResNet50Kernels());

  auto computed = a.GetPlan(request);
  ASSERT_TRUE(computed.ok());
  EXPECT_FALSE(computed->from_cache());
  auto again = a.GetPlan(request);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache());
  EXPECT_TRUE(MessageDifferencer::Equals(again->plan(), computed->plan()));

  auto other_replica = b.GetPlan(request);
  ASSERT_TRUE(other_replica.ok());
  EXPECT_TRUE(other_replica->from_cache());
  EXPECT_TRUE(MessageDifferencer::Equals(other_replica->plan(), computed->plan()));

  const auto& ma = *a.server->metrics().registry();
  const auto& mb = *b.server->metrics().registry();
  EXPECT_EQ(metrics::Value(ma, "ucudnn_plan_cache_hits_total", {{"tier", "memory"}}), 1);
  EXPECT_EQ(metrics::Value(mb, "ucudnn_plan_cache_hits_total", {{"tier", "database"}}), 1);

  // Another request (a different budget) is another plan, computed afresh.
  auto other = request;
  other.set_workspace_bytes(8ull << 20);
  auto different = b.GetPlan(other);
  ASSERT_TRUE(different.ok());
  EXPECT_FALSE(different->from_cache());
  EXPECT_NE(different->plan().plan_hash(), computed->plan().plan_hash());
}

TEST_F(ServerTest, CachedPlanOfACollidingRequestIsNotServed) {
  Seed(url(), [](const ConvProblem&) { return true; });
  const auto request = PlanRequestFor({ResNet50Kernels()[0], ResNet50Kernels()[3]});
  auto other = request;
  other.set_workspace_bytes(8ull << 20);
  std::string key;
  v1::Plan expected;
  {
    TestServer t = Launch(BaseConfig(url()));
    ASSERT_TRUE(t.server);
    auto computed = t.GetPlan(request);
    ASSERT_TRUE(computed.ok());
    expected = computed->plan();
    key = expected.plan_hash();
    auto other_plan = t.GetPlan(other);
    ASSERT_TRUE(other_plan.ok());
    // Pretend the other request's plan had been stored under this request's key (a 64-bit
    // collision): its body, with the key it would then carry.
    v1::Plan forged = other_plan->plan();
    forged.set_plan_hash(key);
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params("UPDATE plans SET body = $1 WHERE hash = $2",
                   pqxx::binarystring(forged.SerializeAsString()),
                   static_cast<int64_t>(*ParseHashHex(key)));
    tx.commit();
  }
  // A fresh replica (nothing in memory) finds the forged row, sees that it answers another
  // request, and computes the right plan.
  TestServer fresh = Launch(BaseConfig(url()));
  ASSERT_TRUE(fresh.server);
  auto served = fresh.GetPlan(request);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_FALSE(served->from_cache());
  EXPECT_TRUE(MessageDifferencer::Equals(Comparable(served->plan()), Comparable(expected)));
  EXPECT_EQ(metrics::Value(*fresh.server->metrics().registry(), "ucudnn_plan_cache_hits_total",
                           {{"tier", "database"}}),
            0);
}

TEST_F(ServerTest, DatabasePlanCacheIsTrimmedToItsBound) {
  Seed(url(), [](const ConvProblem&) { return true; });
  ServerConfig config = BaseConfig(url());
  config.plan_cache_max_rows = 2;
  config.plan_cache_evict_interval_ms = 50;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  auto request = PlanRequestFor({ResNet50Kernels()[0]});
  for (uint64_t mib : {1, 2, 4, 8, 16}) {
    request.set_workspace_bytes(mib << 20);
    ASSERT_TRUE(t.GetPlan(request).ok());
  }
  auto rows = [&] {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    return tx.exec1("SELECT count(*) FROM plans")[0].as<int64_t>();
  };
  int64_t count = rows();
  for (int i = 0; i < 300 && count > 2; ++i) {
    std::this_thread::sleep_for(20ms);
    count = rows();
  }
  EXPECT_EQ(count, 2);
  EXPECT_GE(metrics::Value(*t.server->metrics().registry(), "ucudnn_plan_cache_evictions_total"),
            3);
}

// Rows of workers silent for longer than --worker-retention are deleted on the eviction schedule
// (issue 22); a live worker's row stays.
TEST_F(ServerTest, SilentWorkersArePrunedAfterTheRetention) {
  ServerConfig config = BaseConfig(url());
  config.plan_cache_evict_interval_ms = 50;
  config.worker_retention_ms = 3600000;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  auto store = store::Store::Open(url(), 1);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->RegisterWorker("gone:1:gpu0", "node", H100()).ok());
  ASSERT_TRUE((*store)->RegisterWorker("here:1:gpu0", "node", H100()).ok());
  auto workers = [&](const std::string& where) {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    const int64_t n = tx.exec1("SELECT count(*) FROM workers " + where)[0].as<int64_t>();
    tx.commit();
    return n;
  };
  {
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec(
        "UPDATE workers SET last_heartbeat = now() - interval '2 hours' WHERE id = 'gone:1:gpu0'");
    tx.commit();
  }
  for (int i = 0; i < 300 && workers("") > 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(workers("WHERE id = 'gone:1:gpu0'"), 0);
  EXPECT_EQ(workers("WHERE id = 'here:1:gpu0'"), 1);
}

TEST_F(ServerTest, NoMigrateRefusesASchemaOtherThanItsOwn) {
  ServerConfig config = BaseConfig(url());
  config.auto_migrate = false;
  config.start_timeout_ms = 0;
  {  // An empty database: migrate first.
    auto started = PlannerServer::Start(config);
    ASSERT_FALSE(started.ok());
    EXPECT_EQ(started.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(started.status().message().find("ucudnn migrate"), std::string::npos)
        << started.status().message();
  }
  auto store = store::Store::Open(url());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Migrate().ok());
  {  // Current: it starts.
    auto started = PlannerServer::Start(config);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
  }
  {  // Newer than the binary: refused with the message `ucudnn migrate` gives.
    pqxx::connection conn(url());
    pqxx::work tx(conn);
    tx.exec_params("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')",
                   store::Store::LatestSchemaVersion() + 1);
    tx.commit();
  }
  auto migrate = (*store)->Migrate();
  ASSERT_FALSE(migrate.ok());
  auto started = PlannerServer::Start(config);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(started.status().message(), migrate.status().message());
}

TEST_F(ServerTest, NewTimingsChangeTheCacheKey) {
  Seed(url(), [](const ConvProblem&) { return true; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const std::vector<Kernel> kernels = {ResNet50Kernels()[3]};
  const auto request = PlanRequestFor(kernels);
  auto first = t.GetPlan(request);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(t.GetPlan(request)->from_cache());

  // A re-measurement of one algorithm lands (and its notification invalidates the cached table).
  std::vector<Timing> remeasured = MeasuredTimings(kernels[0].problem);
  for (auto& timing : remeasured) timing.time_ms *= 0.5;
  ASSERT_TRUE(t.Submit(kernels[0].problem, remeasured).ok());
  bool recomputed = false;
  for (int i = 0; i < 200 && !recomputed; ++i) {
    auto response = t.GetPlan(request);
    ASSERT_TRUE(response.ok());
    recomputed = response->plan().plan_hash() != first->plan().plan_hash();
    if (recomputed) {
      EXPECT_FALSE(response->from_cache());
      EXPECT_NEAR(response->plan().total_time_ms(), first->plan().total_time_ms() * 0.5, 1e-6);
    } else {
      std::this_thread::sleep_for(25ms);
    }
  }
  EXPECT_TRUE(recomputed);
}

TEST_F(ServerTest, WaitingRequestCompletesWhenTimingsAreSubmitted) {
  ServerConfig config = BaseConfig(url());
  // No periodic re-check within the test's time: only the NOTIFY can end the wait early.
  config.recheck_interval_ms = 600000;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  const std::vector<Kernel> kernels = {ResNet50Kernels()[4], ResNet50Kernels()[5]};
  const auto request = PlanRequestFor(kernels, /*max_wait_ms=*/60000);

  std::thread worker([&] {
    // Play the GPU worker: wait for the jobs, then deliver their timings.
    for (int i = 0; i < 1000 && t.Jobs().size() < 2; ++i) std::this_thread::sleep_for(10ms);
    for (const auto& k : kernels) EXPECT_TRUE(t.Submit(k.problem, MeasuredTimings(k.problem)).ok());
  });
  auto response = t.GetPlan(request, 120s);
  worker.join();
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->plan().status(), v1::PLAN_STATUS_COMPLETE);
  EXPECT_EQ(response->plan().missing_size(), 0);
  EXPECT_GT(response->waited_ms(), 0u);
  EXPECT_LT(response->waited_ms(), 60000u);  // woken, not timed out
  std::string difference;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(Comparable(ExpectedPlan(request)), Comparable(response->plan())))
      << difference;
}

TEST_F(ServerTest, WaitEndsAtTheCallDeadline) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const auto request = PlanRequestFor({ResNet50Kernels()[0]}, /*max_wait_ms=*/600000);
  // The deadline is far shorter than max_wait_ms: the server answers (partial) before it.
  auto response = t.GetPlan(request, 1500ms);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->plan().status(), v1::PLAN_STATUS_PARTIAL);
  EXPECT_EQ(response->plan().missing_size(), 1);
  EXPECT_LT(response->waited_ms(), 1500u);
}

TEST_F(ServerTest, StreamPlanReportsProgressThenTheFinalPlan) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const std::vector<Kernel> kernels = {ResNet50Kernels()[6], ResNet50Kernels()[7]};
  v1::StreamPlanRequest request;
  *request.mutable_request() = PlanRequestFor(kernels, /*max_wait_ms=*/60000);
  auto context = Context(120s);
  auto reader = t.planner->StreamPlan(context.get(), request);

  std::vector<int> ready;
  v1::StreamPlanResponse message;
  size_t submitted = 0;
  bool done = false;
  while (reader->Read(&message)) {
    EXPECT_EQ(message.problems_total(), 2);
    ready.push_back(message.problems_ready());
    if (message.done()) {
      done = true;
      EXPECT_EQ(message.plan().status(), v1::PLAN_STATUS_COMPLETE);
      EXPECT_EQ(message.plan().kernels_size(), 2);
      break;
    }
    EXPECT_FALSE(message.has_plan());
    // Each progress report lets one more problem land.
    if (submitted < kernels.size()) {
      const auto& problem = kernels[submitted++].problem;
      EXPECT_TRUE(t.Submit(problem, MeasuredTimings(problem)).ok());
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(done);
  ASSERT_GE(ready.size(), 3u);
  EXPECT_EQ(ready.front(), 0);
  EXPECT_TRUE(std::is_sorted(ready.begin(), ready.end()));
  EXPECT_NE(std::find(ready.begin(), ready.end(), 1), ready.end());
  EXPECT_EQ(ready.back(), 2);
}

TEST_F(ServerTest, ShutdownEndsWaitingCallsWithAPartialPlan) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const auto request = PlanRequestFor({ResNet50Kernels()[0]}, /*max_wait_ms=*/600000);
  std::thread caller([&] {
    auto response = t.GetPlan(request, 300s);
    ASSERT_TRUE(response.ok()) << response.status().ToString();
    EXPECT_EQ(response->plan().status(), v1::PLAN_STATUS_PARTIAL);
  });
  for (int i = 0; i < 1000 && t.Jobs().empty(); ++i) std::this_thread::sleep_for(10ms);
  t.server->Shutdown(10s);
  caller.join();
}

TEST_F(ServerTest, FailedJobIsReportedWithItsErrorUntilRetried) {
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const Kernel forward = ResNet50Kernels()[0];
  const Kernel backward = ResNet50Kernels()[1];
  ASSERT_EQ(forward.problem.op, ConvOp::kForward);
  ASSERT_NE(backward.problem.op, ConvOp::kForward);
  const auto request = PlanRequestFor({forward, backward});
  auto first = t.GetPlan(request);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->plan().missing_size(), 1);
  const int64_t job_id = first->plan().missing(0).job_id();

  // A worker fails the job for good.
  auto store = store::Store::Open(url());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->RegisterWorker("gpu-1", "node", H100()).ok());
  auto claimed = (*store)->ClaimJob(H100().Hash(), "gpu-1", 60s);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_EQ((*claimed)->id, job_id);
  ASSERT_EQ(*(*store)->FailJob(job_id, "gpu-1", "CUDNN_STATUS_EXECUTION_FAILED", 1),
            store::JobState::kFailed);

  // Asked again (even willing to wait): the failure is the answer, and no new job appears.
  auto waiting = request;
  waiting.set_max_wait_ms(60000);
  auto second = t.GetPlan(waiting, 30s);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_LT(second->waited_ms(), 5000u);  // nothing to wait for
  ASSERT_EQ(second->plan().missing_size(), 1);
  const v1::MissingProblem& missing = second->plan().missing(0);
  EXPECT_EQ(missing.job_id(), job_id);
  EXPECT_EQ(missing.job_state(), "failed");
  EXPECT_EQ(missing.error(), "CUDNN_STATUS_EXECUTION_FAILED");
  const v1::KernelPlan& kernel = second->plan().kernels(1);
  EXPECT_EQ(kernel.status(), v1::KERNEL_PLAN_STATUS_MISSING);
  EXPECT_NE(kernel.reason().find("job " + std::to_string(job_id) +
                                 " failed: CUDNN_STATUS_EXECUTION_FAILED"),
            std::string::npos)
      << kernel.reason();
  EXPECT_TRUE(FromProto(second->plan()).ok());  // a client can read it
  ASSERT_EQ(t.Jobs().size(), 1u);
  EXPECT_EQ(t.Jobs()[0].state(), "failed");
  EXPECT_EQ(t.Jobs()[0].error(), "CUDNN_STATUS_EXECUTION_FAILED");

  // The operator retries it: a write, so the token is needed.
  v1::RetryJobRequest retry;
  retry.set_job_id(job_id);
  v1::RetryJobResponse retried;
  {
    auto context = Context();
    EXPECT_EQ(t.anonymous_catalog->RetryJob(context.get(), retry, &retried).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    auto context = Context();
    context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    const grpc::Status status = t.catalog->RetryJob(context.get(), retry, &retried);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(retried.job().id(), job_id);
    EXPECT_EQ(retried.job().state(), "queued");
    EXPECT_EQ(retried.job().attempts(), 0);
  }
  {
    auto context = Context();
    context->AddMetadata("authorization", std::string("Bearer ") + kToken);
    EXPECT_EQ(t.catalog->RetryJob(context.get(), retry, &retried).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);  // queued, not failed
    retry.set_job_id(987654);
    auto unknown = Context();
    unknown->AddMetadata("authorization", std::string("Bearer ") + kToken);
    EXPECT_EQ(t.catalog->RetryJob(unknown.get(), retry, &retried).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  auto third = t.GetPlan(request);
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(third->plan().missing_size(), 1);
  EXPECT_EQ(third->plan().missing(0).job_id(), job_id);
  EXPECT_EQ(third->plan().missing(0).job_state(), "queued");
  EXPECT_TRUE(third->plan().missing(0).error().empty());
  EXPECT_EQ(t.Jobs().size(), 1u);
}

TEST_F(ServerTest, PartlyMeasuredProblemSaysWhichSizesAreMissing) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const Kernel kernel = ResNet50Kernels()[3];
  std::vector<Timing> some;
  for (const auto& timing : MeasuredTimings(kernel.problem)) {
    if (timing.micro_batch <= 32) some.push_back(timing);
  }
  ASSERT_FALSE(some.empty());
  ASSERT_TRUE(t.Submit(kernel.problem, some).ok());
  auto response = t.GetPlan(PlanRequestFor({kernel}));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  ASSERT_EQ(response->plan().kernels_size(), 1);
  const std::string& reason = response->plan().kernels(0).reason();
  // Power-of-two sizes up to 256: 1..32 are there, 64, 128 and 256 are not.
  EXPECT_EQ(reason.rfind("no timings at micro-batch sizes 64, 128, 256; 6 of 9 sizes measured; "
                         "benchmark job ",
                         0),
            0u)
      << reason;
  EXPECT_NE(reason.find(" is queued"), std::string::npos) << reason;
}

TEST_F(ServerTest, StreamAndExplainShareTheBoundOfPlanCalls) {
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  ServerConfig config = BaseConfig(url());
  config.max_blocking_calls = 1;
  TestServer t = Launch(config);
  ASSERT_TRUE(t.server);
  // One stream waits for a benchmark that never comes: it holds the only place.
  v1::StreamPlanRequest stream_request;
  *stream_request.mutable_request() = PlanRequestFor({ResNet50Kernels()[1]}, 600000);
  auto stream_context = Context(600s);
  auto reader = t.planner->StreamPlan(stream_context.get(), stream_request);
  v1::StreamPlanResponse progress;
  ASSERT_TRUE(reader->Read(&progress));  // admitted and waiting

  const auto request = PlanRequestFor({ResNet50Kernels()[0]});
  {
    v1::ExplainPlanRequest explain;
    *explain.mutable_request() = request;
    v1::ExplainPlanResponse response;
    auto context = Context();
    EXPECT_EQ(t.catalog->ExplainPlan(context.get(), explain, &response).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    v1::StreamPlanRequest second;
    *second.mutable_request() = request;
    auto context = Context();
    auto other = t.planner->StreamPlan(context.get(), second);
    v1::StreamPlanResponse ignored;
    while (other->Read(&ignored)) {
    }
    EXPECT_EQ(other->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  EXPECT_EQ(t.GetPlan(request).status().code(), StatusCode::kResourceExhausted);

  // The stream goes away: its place is free again.
  stream_context->TryCancel();
  while (reader->Read(&progress)) {
  }
  (void)reader->Finish();
  bool admitted = false;
  for (int i = 0; i < 500 && !admitted; ++i) {
    v1::ExplainPlanRequest explain;
    *explain.mutable_request() = request;
    v1::ExplainPlanResponse response;
    auto context = Context();
    const grpc::Status status = t.catalog->ExplainPlan(context.get(), explain, &response);
    admitted = status.ok();
    if (!admitted) {
      ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      std::this_thread::sleep_for(10ms);
    }
  }
  EXPECT_TRUE(admitted);
  EXPECT_TRUE(t.GetPlan(request).ok());
}

// ---- Timing submission ------------------------------------------------------------------------

TEST_F(ServerTest, SubmitTimingsNeedsTheToken) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const ConvProblem problem = ResNet50Kernels()[0].problem;
  const auto measured = MeasuredTimings(problem);
  EXPECT_EQ(t.Submit(problem, measured, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(t.Submit(problem, measured, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(t.Submit(problem, measured, std::string(kToken) + "x").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  {  // Nothing was stored by the refused calls.
    auto context = Context();
    v1::ListDevicesResponse devices;
    ASSERT_TRUE(t.catalog->ListDevices(context.get(), {}, &devices).ok());
    EXPECT_EQ(devices.devices_size(), 0);
  }
  EXPECT_EQ(metrics::Value(*t.server->metrics().registry(), "ucudnn_auth_failures_total"), 3);

  ASSERT_TRUE(t.Submit(problem, measured).ok());
  auto context = Context();
  v1::GetTimingsRequest request;
  *request.mutable_device() = ToProto(H100());
  *request.mutable_problem() = ToProto(problem);
  v1::GetTimingsResponse response;
  ASSERT_TRUE(t.catalog->GetTimings(context.get(), request, &response).ok());
  EXPECT_EQ(response.timings_size(), static_cast<int>(measured.size()));
  EXPECT_EQ(response.problem_hash(), HashHex(StableHash(problem)));
  for (const auto& timing : response.timings()) {
    EXPECT_EQ(timing.measured_by(), "test-submitter");
    EXPECT_FALSE(timing.measured_at().empty());
  }
}

TEST_F(ServerTest, SubmitTimingsValidatesEveryField) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const ConvProblem problem = ResNet50Kernels()[0].problem;
  auto measured = MeasuredTimings(problem);
  ASSERT_GE(measured.size(), 2u);
  auto bad_time = measured;
  bad_time[1].time_ms = -1;
  auto duplicate = measured;
  duplicate[1] = duplicate[0];
  ConvProblem bad_problem = problem;
  bad_problem.c = 0;
  for (const auto& [status, field] : std::vector<std::pair<grpc::Status, std::string>>{
           {t.Submit(problem, bad_time), "timings[1].time_ms"},
           {t.Submit(problem, duplicate), "timings[1]: duplicate"},
           {t.Submit(problem, {}), "timings: must hold"},
           {t.Submit(bad_problem, measured), "problem.c"}}) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(status.error_message().find(field), std::string::npos) << status.error_message();
  }
}

// ---- Catalog ----------------------------------------------------------------------------------

TEST_F(ServerTest, CatalogViews) {
  Seed(url(), [](const ConvProblem&) { return true; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  {
    auto context = Context();
    v1::ListDevicesResponse response;
    ASSERT_TRUE(t.catalog->ListDevices(context.get(), {}, &response).ok());
    ASSERT_EQ(response.devices_size(), 1);
    EXPECT_EQ(response.devices(0).fingerprint_hash(), HashHex(H100().Hash()));
    EXPECT_EQ(response.devices(0).fingerprint().name(), H100().name);
    size_t rows = 0;
    for (const auto& [key, table] : H100Fp32Tables()) rows += table.table.entries.size();
    EXPECT_EQ(response.devices(0).timing_count(), static_cast<int64_t>(rows));
  }
  {
    auto context = Context();
    v1::ListWorkersResponse response;
    ASSERT_TRUE(t.catalog->ListWorkers(context.get(), {}, &response).ok());
    EXPECT_EQ(response.workers_size(), 0);
  }
  {
    auto context = Context();
    v1::ListJobsRequest request;
    request.set_state("sleeping");
    v1::ListJobsResponse response;
    const grpc::Status status = t.catalog->ListJobs(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("state"), std::string::npos);
  }
  const Kernel kernel = ResNet50Kernels()[4];  // a 3x3 forward convolution
  {
    auto context = Context();
    v1::GetParetoFrontRequest request;
    *request.mutable_device() = ToProto(H100());
    *request.mutable_kernel() = ToProto(kernel);
    v1::GetParetoFrontResponse response;
    ASSERT_TRUE(t.catalog->GetParetoFront(context.get(), request, &response).ok());
    ASSERT_GE(response.points_size(), 1);
    for (int i = 1; i < response.points_size(); ++i) {
      EXPECT_GT(response.points(i).workspace_bytes(), response.points(i - 1).workspace_bytes());
      EXPECT_LT(response.points(i).time_ms(), response.points(i - 1).time_ms());
    }
    const auto expected = ParetoFront(*FindTimings(H100Fp32Tables(), kernel.problem),
                                      kernel.mini_batch, BatchPolicy::kPowerOfTwo);
    EXPECT_EQ(response.points_size(), static_cast<int>(expected.size()));
  }
  {
    auto context = Context();
    v1::GetParetoFrontRequest request;
    *request.mutable_device() = ToProto(H100());
    Kernel unknown = kernel;
    unknown.problem.k = 96;
    *request.mutable_kernel() = ToProto(unknown);
    v1::GetParetoFrontResponse response;
    EXPECT_EQ(t.catalog->GetParetoFront(context.get(), request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    // ExplainPlan plans (with a missing problem) but writes nothing.
    auto context = Context();
    v1::ExplainPlanRequest request;
    Kernel unknown = kernel;
    unknown.problem.k = 96;
    unknown.name = "unknown/fwd";
    *request.mutable_request() = PlanRequestFor({ResNet50Kernels()[0], unknown});
    v1::ExplainPlanResponse response;
    ASSERT_TRUE(t.catalog->ExplainPlan(context.get(), request, &response).ok());
    EXPECT_EQ(response.plan().kernels_size(), 2);
    EXPECT_EQ(response.plan().status(), v1::PLAN_STATUS_PARTIAL);
    EXPECT_NE(response.text().find(ResNet50Kernels()[0].name), std::string::npos)
        << response.text();
    EXPECT_NE(response.text().find("unknown/fwd"), std::string::npos);
    EXPECT_TRUE(t.Jobs().empty());
  }
}

TEST_F(ServerTest, ServesTlsWhenGivenACertificate) {
  const std::string dir = ::testing::TempDir() + "ucudnn-tls-" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a certificate";
  ServerConfig config = BaseConfig(url());
  config.tls_cert = dir + "/cert.pem";
  config.tls_key = dir + "/key.pem";
  auto server = PlannerServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());

  std::ifstream cert_file(config.tls_cert);
  std::stringstream cert;
  cert << cert_file.rdbuf();
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = cert.str();
  auto secure = v1::CatalogService::NewStub(grpc::CreateChannel(target, grpc::SslCredentials(tls)));
  auto context = Context(10s);
  v1::ListDevicesResponse devices;
  const grpc::Status status = secure->ListDevices(context.get(), {}, &devices);
  EXPECT_TRUE(status.ok()) << status.error_message();

  auto plaintext =
      v1::CatalogService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  auto plain_context = Context(3s);
  EXPECT_FALSE(plaintext->ListDevices(plain_context.get(), {}, &devices).ok());
  std::system(("rm -rf " + dir).c_str());
}

// ---- Health, reflection, metrics ----------------------------------------------------------------

grpc::health::v1::HealthCheckResponse::ServingStatus Health(TestServer& t,
                                                            const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(t.channel);
  auto context = Context(5s);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(context.get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST_F(ServerTest, HealthFollowsTheDatabase) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  using grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(Health(t, ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(t, kPlannerServiceName), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(t, kTimingServiceName), HealthCheckResponse::SERVING);

  ASSERT_TRUE(postgres().Stop().ok());
  bool not_serving = false;
  for (int i = 0; i < 300 && !not_serving; ++i) {
    not_serving = Health(t, "") == HealthCheckResponse::NOT_SERVING;
    if (!not_serving) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(not_serving);
  EXPECT_EQ(Health(t, kPlannerServiceName), HealthCheckResponse::NOT_SERVING);
  // Liveness stays SERVING: a database outage is no reason to restart the server.
  EXPECT_EQ(Health(t, kLivenessServiceName), HealthCheckResponse::SERVING);
  // A read while the database is away is UNAVAILABLE, not a crash or a hang.
  auto context = Context(20s);
  v1::ListDevicesResponse devices;
  EXPECT_EQ(t.catalog->ListDevices(context.get(), {}, &devices).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(postgres().Start().ok());
  bool serving = false;
  for (int i = 0; i < 1000 && !serving; ++i) {
    serving = Health(t, "") == HealthCheckResponse::SERVING;
    if (!serving) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(serving);
}

// Lists services through grpc.reflection.v1alpha with hand-encoded messages (the reflection
// protos are not installed): ServerReflectionRequest{list_services = ""} is field 7.
// `finished` (when given) gets the stream's final status.
std::vector<std::string> ReflectedServices(const std::shared_ptr<grpc::Channel>& channel,
                                           grpc::Status* finished = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  auto context = Context(10s);
  auto call = stub.PrepareCall(
      context.get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](int expected) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, reinterpret_cast<void*>(expected));
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (!step(1)) return {};
  const std::string request_bytes("\x3a\x00", 2);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  if (!step(2)) return {};
  call->WritesDone(reinterpret_cast<void*>(3));
  step(3);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  if (!step(4)) return {};
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  if (finished != nullptr) *finished = status;
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // ServerReflectionResponse.list_services_response (6) -> ListServiceResponse.service (1) ->
  // ServiceResponse.name (1).
  std::vector<std::string> names;
  google::protobuf::UnknownFieldSet outer;
  EXPECT_TRUE(outer.ParseFromString(bytes));
  for (int i = 0; i < outer.field_count(); ++i) {
    if (outer.field(i).number() != 6) continue;
    google::protobuf::UnknownFieldSet list;
    EXPECT_TRUE(list.ParseFromString(outer.field(i).length_delimited()));
    for (int j = 0; j < list.field_count(); ++j) {
      google::protobuf::UnknownFieldSet service;
      EXPECT_TRUE(service.ParseFromString(list.field(j).length_delimited()));
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1) names.push_back(service.field(k).length_delimited());
      }
    }
  }
  return names;
}

TEST_F(ServerTest, ReflectionListsTheServices) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const auto names = ReflectedServices(t.channel);
  const std::set<std::string> listed(names.begin(), names.end());
  for (const char* expected :
       {kPlannerServiceName, kCatalogServiceName, kTimingServiceName, "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_EQ(listed.count(expected), 1u) << expected;
  }
}

// The normal end of a reflection stream (the client's half-close, which every grpcurl and buf
// call ends with) is no malformed request: the stream ends OK and no error is counted (issue 22).
TEST_F(ServerTest, ReflectionStreamsEndWithoutAnErrorCounted) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  for (int i = 0; i < 2; ++i) {
    grpc::Status finished(grpc::StatusCode::UNKNOWN, "not finished");
    EXPECT_FALSE(ReflectedServices(t.channel, &finished).empty());
    EXPECT_TRUE(finished.ok()) << finished.error_code() << ": " << finished.error_message();
  }
  httplib::Client http("127.0.0.1", t.server->metrics_port());
  auto result = http.Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->body.find("code=\"INVALID_ARGUMENT\""), std::string::npos) << result->body;
}

TEST_F(ServerTest, MetricsEndpointServesCounters) {
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  ASSERT_GT(t.server->metrics_port(), 0);
  const auto request = PlanRequestFor({ResNet50Kernels()[0], ResNet50Kernels()[1]});
  ASSERT_TRUE(t.GetPlan(request).ok());  // enqueues one job: conv1's backward-data problem
  v1::GetPlanRequest invalid = request;
  invalid.clear_device();
  EXPECT_FALSE(t.GetPlan(invalid).ok());

  httplib::Client http("127.0.0.1", t.server->metrics_port());
  auto result = http.Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  const std::string& text = result->body;
  for (const std::string& expected : std::vector<std::string>{
           "ucudnn_rpc_requests_total{code=\"OK\",method=\"GetPlan\"} 1",
           "ucudnn_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"GetPlan\"} 1",
           "ucudnn_rpc_duration_seconds_count{code=\"OK\",method=\"GetPlan\"} 1",
           "ucudnn_plan_cache_misses_total 1", "ucudnn_jobs_enqueued_total 1",
           "ucudnn_queue_depth 1", "ucudnn_database_up 1",
           "ucudnn_device_jobs{device=\"NVIDIA H100 80GB HBM3\",device_hash=\"" +
               HashHex(H100().Hash()) + "\",state=\"queued\"} 1",
           // Served by the shared endpoint (ucudnn::metrics, prometheus-cpp's exposer).
           "# TYPE exposer_scrapes_total counter"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

// ---- Hostile bodies (issue 15) ------------------------------------------------------------------

// One unary call with raw bytes as the body (server-streaming methods answer their error the same
// way).
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& body) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  auto context = Context(20s);
  context->AddMetadata("authorization", std::string("Bearer ") + kToken);
  std::promise<grpc::Status> done;
  generic.UnaryCall(context.get(), method, grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}

std::string LengthDelimited(int field, const std::string& payload) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(payload.size()) + payload;
}

// A body of `type` whose first string field (at most two messages deep) holds non-UTF-8 bytes;
// empty when the type has no string field that deep.
std::string NonUtf8Body(const google::protobuf::Descriptor* type, int depth = 0) {
  for (int i = 0; i < type->field_count(); ++i) {
    const auto* field = type->field(i);
    if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
      return LengthDelimited(field->number(), "\xff\xfe\xc3(");
    }
  }
  if (depth >= 2) return {};
  for (int i = 0; i < type->field_count(); ++i) {
    const auto* field = type->field(i);
    if (field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE) continue;
    const std::string inner = NonUtf8Body(field->message_type(), depth + 1);
    if (!inner.empty()) return LengthDelimited(field->number(), inner);
  }
  return {};
}

TEST_F(ServerTest, MalformedBodiesAreInvalidArgumentNamingTheTypeAndCounted) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  std::map<std::string, int> sent;  // short method name -> malformed calls
  int methods = 0;
  for (const char* service_name :
       {"ucudnn.v1.PlannerService", "ucudnn.v1.CatalogService", "ucudnn.v1.TimingService"}) {
    const auto* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
    ASSERT_NE(service, nullptr) << service_name;
    for (int m = 0; m < service->method_count(); ++m) {
      const auto* method = service->method(m);
      ++methods;
      const std::string path = "/" + service->full_name() + "/" + method->name();
      std::vector<std::string> bodies = {
          std::string("\xff", 1),                     // a tag whose varint never ends
          LengthDelimited(1, "abcdef").substr(0, 4),  // a field longer than the body
          std::string("\x0b\x14", 2),                 // group 1 started, group 2 ended
      };
      if (const std::string bad = NonUtf8Body(method->input_type()); !bad.empty()) {
        bodies.push_back(bad);
      }
      for (const auto& body : bodies) {
        const grpc::Status status = RawCall(t.channel, path, body);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << path << " body of " << body.size() << " bytes: " << status.error_message();
        EXPECT_NE(status.error_message().find("not a valid " + method->input_type()->full_name()),
                  std::string::npos)
            << path << ": " << status.error_message();
        ++sent[method->name()];
      }
    }
  }
  EXPECT_GE(methods, 10);  // the 10 methods of the three services
  httplib::Client http("127.0.0.1", t.server->metrics_port());
  auto result = http.Get("/metrics");
  ASSERT_TRUE(result);
  for (const auto& [method, count] : sent) {
    const std::string line = "ucudnn_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"" +
                             method + "\"} " + std::to_string(count) + "\n";
    EXPECT_NE(result->body.find(line), std::string::npos) << line << result->body;
  }
  // Still serving well-formed calls.
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  EXPECT_TRUE(t.GetPlan(PlanRequestFor({ResNet50Kernels()[0]})).ok());
}

TEST_F(ServerTest, HugeCallerStringsAreTruncatedInErrors) {
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  const std::string huge(200000, 'x');
  {
    auto context = Context();
    v1::ListJobsRequest request;
    request.set_state(huge);
    v1::ListJobsResponse response;
    const grpc::Status status = t.catalog->ListJobs(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_LT(status.error_message().size(), 1000u);
    EXPECT_NE(status.error_message().find("state"), std::string::npos);
  }
  {
    v1::GetPlanRequest request = PlanRequestFor({ResNet50Kernels()[0]});
    request.mutable_device()->set_backend(huge);
    auto plan = t.GetPlan(request);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().ToString();
    EXPECT_LT(plan.status().message().size(), 1000u);
    EXPECT_NE(plan.status().message().find("device.backend"), std::string::npos);
  }
  {
    auto context = Context();
    v1::GetTimingsRequest request;
    *request.mutable_device() = ToProto(H100());
    request.mutable_device()->set_backend(huge);
    *request.mutable_problem() = ToProto(ResNet50Kernels()[0].problem);
    v1::GetTimingsResponse response;
    const grpc::Status status = t.catalog->GetTimings(context.get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_LT(status.error_message().size(), 1000u);
  }
}

// ---- Database outage --------------------------------------------------------------------------

std::string ScrapeMetrics(TestServer& t) {
  httplib::Client http("127.0.0.1", t.server->metrics_port());
  auto result = http.Get("/metrics");
  return result ? result->body : std::string();
}

TEST_F(ServerTest, PlansAlreadyCachedInMemoryAreServedWhileTheDatabaseIsDown) {
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  TestServer t = Launch(BaseConfig(url()));
  ASSERT_TRUE(t.server);
  std::vector<Kernel> forward;
  for (const Kernel& k : ResNet50Kernels()) {
    if (k.problem.op == ConvOp::kForward && forward.size() < 3) forward.push_back(k);
  }
  ASSERT_EQ(forward.size(), 3u);
  // The request memo (what the outage answer comes from) is kept while the timings cache is live.
  auto listener_connected = [&](int value) {
    const std::string line = "\nucudnn_timing_listener_connected " + std::to_string(value) + "\n";
    for (int i = 0; i < 1000; ++i) {
      if (ScrapeMetrics(t).find(line) != std::string::npos) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  };
  ASSERT_TRUE(listener_connected(1));
  const auto request = PlanRequestFor({forward[0], forward[1]});
  auto first = t.GetPlan(request);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->plan().status(), v1::PLAN_STATUS_COMPLETE);
  EXPECT_FALSE(first->from_cache());
  const auto unseen = PlanRequestFor({forward[2]});

  ASSERT_TRUE(postgres().Stop().ok());
  // Wait until the server knows: the timing listener is down (the timings cache is then off, so
  // nothing can be confirmed current).
  ASSERT_TRUE(listener_connected(0));

  auto cached = t.GetPlan(request, 30s);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_TRUE(cached->from_cache());
  EXPECT_TRUE(MessageDifferencer::Equals(cached->plan(), first->plan()));
  // A request this process never answered cannot be planned without the database.
  auto refused = t.GetPlan(unseen, 30s);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(ScrapeMetrics(t).find("ucudnn_plan_cache_hits_total{tier=\"memory_database_down\"} 1"),
            std::string::npos)
      << ScrapeMetrics(t);

  ASSERT_TRUE(postgres().Start().ok());
}

// ---- Authorization (issue 15) ------------------------------------------------------------------

constexpr const char* kPlanToken = "plan-token";
constexpr const char* kSubmitToken = "submit-token";

ServerConfig RoleConfig(const std::string& url, const std::string& anonymous_role = "plan") {
  ServerConfig config = BaseConfig(url);
  config.plan_tokens = {kPlanToken};
  config.submit_tokens = {kSubmitToken};
  config.anonymous_role = anonymous_role;
  return config;
}

std::unique_ptr<grpc::ClientContext> ContextAs(const std::string& token) {
  auto context = Context();
  if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
  return context;
}

// Without a token when `token` is empty.
grpc::Status GetPlanAs(TestServer& t, const v1::GetPlanRequest& request, const std::string& token,
                       v1::GetPlanResponse* response = nullptr) {
  v1::GetPlanResponse ignored;
  auto& stub = token.empty() ? *t.anonymous_planner : *t.planner;
  return stub.GetPlan(ContextAs(token).get(), request, response != nullptr ? response : &ignored);
}

// Rows of every table a caller's request could create.
int64_t CallerWrittenRows(const std::string& url) {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  return tx
      .exec1(
          "SELECT (SELECT count(*) FROM devices) + (SELECT count(*) FROM problems) + "
          "(SELECT count(*) FROM jobs) + (SELECT count(*) FROM plans)")[0]
      .as<int64_t>();
}

TEST_F(ServerTest, MadeUpDevicesWriteNothingAndAddNoMetricLabels) {
  TestServer t = Launch(RoleConfig(url()));
  ASSERT_TRUE(t.server);
  const int64_t before = CallerWrittenRows(url());
  const std::string tokens[] = {"", kPlanToken, kSubmitToken};
  for (int i = 0; i < 300; ++i) {
    DeviceFingerprint device = H100();
    device.name = "made-up GPU " + std::to_string(i);
    v1::GetPlanRequest request = PlanRequestFor({ResNet50Kernels()[i % 10]});
    *request.mutable_device() = ToProto(device);
    v1::GetPlanResponse response;
    const grpc::Status status = GetPlanAs(t, request, tokens[i % 3], &response);
    // Planned read-only: an answer (nothing measured, so partial), nothing enqueued.
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
    EXPECT_EQ(response.plan().status(), v1::PLAN_STATUS_PARTIAL);
    ASSERT_EQ(response.plan().missing_size(), 1);
    EXPECT_EQ(response.plan().missing(0).job_id(), 0);
  }
  EXPECT_EQ(CallerWrittenRows(url()), before);
  const std::string metrics = ScrapeMetrics(t);
  EXPECT_EQ(metrics.find("made-up"), std::string::npos);
  EXPECT_EQ(metrics.find("ucudnn_device_jobs{"), std::string::npos) << metrics;

  // An admin may register a device by planning for it: the count above would have seen that.
  DeviceFingerprint device = H100();
  device.name = "made-up GPU by an admin";
  v1::GetPlanRequest request = PlanRequestFor({ResNet50Kernels()[0]});
  *request.mutable_device() = ToProto(device);
  ASSERT_TRUE(GetPlanAs(t, request, kToken).ok());
  EXPECT_GT(CallerWrittenRows(url()), before);
}

TEST_F(ServerTest, EachRoleMayDoWhatItsRoleAllows) {
  Seed(url(), [](const ConvProblem& p) { return p.op == ConvOp::kForward; });
  // A known device with one problem missing (conv1's backward data).
  const auto missing = PlanRequestFor({ResNet50Kernels()[0], ResNet50Kernels()[1]});
  auto jobs = [&] {
    pqxx::connection conn(url());
    pqxx::nontransaction tx(conn);
    return tx.exec1("SELECT count(*) FROM jobs")[0].as<int64_t>();
  };
  {
    TestServer t = Launch(RoleConfig(url(), "read"));
    ASSERT_TRUE(t.server);
    // read (no token) and submit: planned from what is there, nothing enqueued.
    ASSERT_TRUE(GetPlanAs(t, missing, "").ok());
    ASSERT_TRUE(GetPlanAs(t, missing, kSubmitToken).ok());
    EXPECT_EQ(jobs(), 0);
    // plan: enqueues for a known device.
    ASSERT_TRUE(GetPlanAs(t, missing, kPlanToken).ok());
    EXPECT_EQ(jobs(), 1);

    // SubmitTimings: submit and admin only.
    const ConvProblem problem = ResNet50Kernels()[1].problem;
    const auto measured = MeasuredTimings(problem);
    EXPECT_EQ(t.Submit(problem, measured, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(t.Submit(problem, measured, kPlanToken).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(t.Submit(problem, measured, kSubmitToken).ok());
    EXPECT_TRUE(t.Submit(problem, measured, kToken).ok());

    // RetryJob: admin only (NOT_FOUND: past the role check, no such job).
    v1::RetryJobRequest retry;
    retry.set_job_id(987654);
    v1::RetryJobResponse retried;
    EXPECT_EQ(t.catalog->RetryJob(ContextAs(kSubmitToken).get(), retry, &retried).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(t.catalog->RetryJob(ContextAs(kPlanToken).get(), retry, &retried).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(t.catalog->RetryJob(ContextAs(kToken).get(), retry, &retried).error_code(),
              grpc::StatusCode::NOT_FOUND);
    // Reads are open.
    v1::ListDevicesResponse devices;
    EXPECT_TRUE(t.anonymous_catalog->ListDevices(ContextAs("").get(), {}, &devices).ok());
    // A wrong token is refused even where no token would do.
    EXPECT_EQ(GetPlanAs(t, missing, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    TestServer t = Launch(RoleConfig(url(), "none"));
    ASSERT_TRUE(t.server);
    v1::ListDevicesResponse devices;
    EXPECT_EQ(t.anonymous_catalog->ListDevices(ContextAs("").get(), {}, &devices).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(t.catalog->ListDevices(ContextAs(kSubmitToken).get(), {}, &devices).ok());
    EXPECT_EQ(GetPlanAs(t, missing, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(GetPlanAs(t, missing, kPlanToken).ok());
  }
  // The default (no --anonymous-role) is "read": a caller without a token gets a plan from what
  // is stored, and nothing it sends creates a row, for a known device or an unknown one.
  EXPECT_EQ(BaseConfig(url()).anonymous_role, "read");
  {
    TestServer t = Launch(BaseConfig(url()));
    ASSERT_TRUE(t.server);
    DeviceFingerprint device = H100();
    device.name = "a GPU no worker registered yet";
    v1::GetPlanRequest request = PlanRequestFor({ResNet50Kernels()[0]});
    *request.mutable_device() = ToProto(device);
    // The seeded (known) device, a problem nobody measured (a backward kernel but the one
    // submitted above).
    v1::GetPlanRequest unmeasured;
    for (const Kernel& kernel : ResNet50Kernels()) {
      if (kernel.problem.op != ConvOp::kForward &&
          !(kernel.problem == ResNet50Kernels()[1].problem)) {
        unmeasured = PlanRequestFor({kernel});
        break;
      }
    }
    ASSERT_EQ(unmeasured.kernels_size(), 1);
    const int64_t before = CallerWrittenRows(url());
    ASSERT_TRUE(GetPlanAs(t, request, "").ok());
    v1::GetPlanResponse partial;
    ASSERT_TRUE(GetPlanAs(t, unmeasured, "", &partial).ok());
    EXPECT_EQ(partial.plan().status(), v1::PLAN_STATUS_PARTIAL);
    EXPECT_EQ(partial.plan().missing(0).job_id(), 0);
    EXPECT_EQ(CallerWrittenRows(url()), before);
    // The same calls with a token enqueue (the test channel's admin token).
    ASSERT_TRUE(GetPlanAs(t, request, kToken).ok());
    EXPECT_GT(CallerWrittenRows(url()), before);
  }
}

}  // namespace
}  // namespace ucudnn::server
