// Bad input against the real server binary: every field of every request out of range or
// malformed is answered INVALID_ARGUMENT with a message that starts with the field's path, and
// writes nothing (row counts of every table compared around each call); oversized messages are
// refused with RESOURCE_EXHAUSTED; random bytes on the port, on the HTTP/2 layer and as message
// bodies leave the server healthy.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <future>
#include <limits>
#include <random>

#include "e2e/e2e_fixture.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ucudnn::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The server of these tests refuses requests above this size.
constexpr const char* kMaxMessageFlag = "1MiB";
constexpr size_t kServerMaxMessageBytes = 1 << 20;

// One way to spoil a message: the path of the field it spoils (relative to the message that
// holds it) and the change.
template <typename Message>
struct Mutation {
  std::string field;
  std::function<void(Message&)> apply;
};

std::vector<Mutation<v1::ConvProblem>> ProblemMutations() {
  using P = v1::ConvProblem;
  return {
      {"op", [](P& p) { p.set_op(v1::CONV_OP_UNSPECIFIED); }},
      {"op", [](P& p) { p.set_op(static_cast<v1::ConvOp>(99)); }},
      {"c", [](P& p) { p.set_c(0); }},
      {"c", [](P& p) { p.set_c(-3); }},
      {"c", [](P& p) { p.set_c(65537); }},
      {"h", [](P& p) { p.set_h(0); }},
      {"h", [](P& p) { p.set_h(32769); }},
      {"w", [](P& p) { p.set_w(-1); }},
      {"w", [](P& p) { p.set_w(std::numeric_limits<int64_t>::max()); }},
      {"k", [](P& p) { p.set_k(0); }},
      {"k", [](P& p) { p.set_k(std::numeric_limits<int64_t>::min()); }},
      {"r", [](P& p) { p.set_r(0); }},
      {"r", [](P& p) { p.set_r(1025); }},
      {"s", [](P& p) { p.set_s(-1); }},
      {"pad_h", [](P& p) { p.set_pad_h(-1); }},
      {"pad_h", [](P& p) { p.set_pad_h(3); }},  // as large as the filter
      {"pad_w", [](P& p) { p.set_pad_w(std::numeric_limits<int64_t>::max()); }},
      {"stride_h", [](P& p) { p.set_stride_h(-1); }},
      {"stride_h", [](P& p) { p.set_stride_h(1025); }},
      {"stride_w", [](P& p) { p.set_stride_w(1 << 20); }},
      {"dilation_h", [](P& p) { p.set_dilation_h(-2); }},
      {"dilation_w", [](P& p) { p.set_dilation_w(1025); }},
      {"groups", [](P& p) { p.set_groups(-1); }},
      {"groups", [](P& p) { p.set_groups(3); }},  // divides neither k = 8 nor c = 5 or 10
      {"data_type", [](P& p) { p.set_data_type(static_cast<v1::DataType>(42)); }},
      {"compute_type", [](P& p) { p.set_compute_type(static_cast<v1::DataType>(-5)); }},
      {"layout", [](P& p) { p.set_layout(static_cast<v1::TensorLayout>(9)); }},
      {"math", [](P& p) { p.set_math(static_cast<v1::MathMode>(12)); }},
      {"out_h",  // a 3-high filter over 1 row without padding
       [](P& p) {
         p.set_h(1);
         p.set_r(3);
         p.set_pad_h(0);
       }},
      {"c * h * w",
       [](P& p) {
         p.set_c(65536);
         p.set_h(32768);
         p.set_w(32768);
       }},
  };
}

std::vector<Mutation<v1::DeviceFingerprint>> DeviceMutations() {
  using D = v1::DeviceFingerprint;
  return {
      {"backend", [](D& d) { d.set_backend(""); }},
      {"backend", [](D& d) { d.set_backend("gpu"); }},
      {"name", [](D& d) { d.set_name(""); }},
      {"name", [](D& d) { d.set_name(std::string(100000, 'x')); }},
      {"name", [](D& d) { d.set_name(std::string("cpu\0model", 9)); }},
      {"cc_major", [](D& d) { d.set_cc_major(-1); }},
      {"cc_minor", [](D& d) { d.set_cc_minor(-7); }},
      {"sm_count", [](D& d) { d.set_sm_count(0); }},  // positive for every backend
      {"sm_count", [](D& d) { d.set_sm_count(-1); }},
      {"cudnn_version", [](D& d) { d.set_cudnn_version(-1); }},
      {"cuda_runtime_version", [](D& d) { d.set_cuda_runtime_version(-91400); }},
      {"blas", [](D& d) { d.set_blas(std::string(5000, 'b')); }},
      {"cc_major",  // a GPU needs a compute capability
       [](D& d) {
         d.set_backend("cudnn");
         d.set_cc_major(0);
       }},
  };
}

// One case of the table: a call that must fail with `code` and a message starting with `field`.
struct BadCall {
  std::string what;
  std::string field;
  std::function<grpc::Status()> call;
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
};

class BadInputTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (HasFatalFailure()) return;
    server_ = StartServer("a", {"--max-message-bytes", kMaxMessageFlag});
    ASSERT_NE(server_, nullptr);
    planner_ = server_->Planner();
    catalog_ = server_->Catalog();
    timings_ = server_->Timings();
    anonymous_timings_ = server_->Timings("");
    // Some content, so that "nothing written" is checked against a non-empty database.
    v1::SubmitTimingsResponse stored;
    ASSERT_TRUE(Submit(ValidSubmission(), &stored).ok());
    v1::GetPlanResponse plan;
    ASSERT_TRUE(planner_
                    ->GetPlan(ContextWithDeadline(seconds(10)).get(),
                              PlanRequestFor(TinyNetwork(), 0), &plan)
                    .ok());
  }

  static v1::ConvProblem ValidProblem() { return ToProto(TinyNetwork()[0].problem); }
  static v1::Kernel ValidKernel() { return ToProto(TinyNetwork()[0]); }
  static v1::DeviceFingerprint ValidDevice() { return ToProto(CpuDevice()); }
  static v1::GetPlanRequest ValidPlanRequest() {
    return PlanRequestFor(TinyNetwork(2), /*max_wait_ms=*/0);
  }
  static v1::SubmitTimingsRequest ValidSubmission() {
    v1::SubmitTimingsRequest r;
    *r.mutable_device() = ValidDevice();
    *r.mutable_problem() = ToProto(TinyNetwork(1)[1].problem);
    r.set_measured_by("e2e");
    for (int i = 0; i < 3; ++i) {
      v1::Timing* t = r.add_timings();
      t->set_micro_batch(4);
      t->set_algo(i);
      t->set_time_ms(1.0 + i);
      t->set_samples(5);
      t->set_workspace_bytes(1024u * static_cast<unsigned>(i));
      t->set_status(v1::TIMING_STATUS_OK);
    }
    return r;
  }

  grpc::Status Submit(const v1::SubmitTimingsRequest& request, v1::SubmitTimingsResponse* response,
                      bool with_token = true) {
    auto context = ContextWithDeadline(seconds(10));
    return (with_token ? timings_ : anonymous_timings_)
        ->SubmitTimings(context.get(), request, response);
  }

  grpc::Status GetPlan(const v1::GetPlanRequest& request) {
    v1::GetPlanResponse response;
    return planner_->GetPlan(ContextWithDeadline(seconds(10)).get(), request, &response);
  }

  grpc::Status StreamPlan(const v1::StreamPlanRequest& request) {
    auto context = ContextWithDeadline(seconds(10));
    auto reader = planner_->StreamPlan(context.get(), request);
    v1::StreamPlanResponse message;
    while (reader->Read(&message)) {
    }
    return reader->Finish();
  }

  // Every RPC that carries a device, with the device spoilt by `m`.
  void AddDeviceCases(std::vector<BadCall>& cases, const Mutation<v1::DeviceFingerprint>& m) {
    cases.push_back({"GetPlan", "device." + m.field, [this, m] {
                       auto r = ValidPlanRequest();
                       m.apply(*r.mutable_device());
                       return GetPlan(r);
                     }});
    cases.push_back({"StreamPlan", "request.device." + m.field, [this, m] {
                       v1::StreamPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       m.apply(*r.mutable_request()->mutable_device());
                       return StreamPlan(r);
                     }});
    cases.push_back({"ExplainPlan", "request.device." + m.field, [this, m] {
                       v1::ExplainPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       m.apply(*r.mutable_request()->mutable_device());
                       v1::ExplainPlanResponse response;
                       return catalog_->ExplainPlan(ContextWithDeadline(seconds(10)).get(), r,
                                                    &response);
                     }});
    cases.push_back({"GetTimings", "device." + m.field, [this, m] {
                       v1::GetTimingsRequest r;
                       *r.mutable_device() = ValidDevice();
                       *r.mutable_problem() = ValidProblem();
                       m.apply(*r.mutable_device());
                       v1::GetTimingsResponse response;
                       return catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), r,
                                                   &response);
                     }});
    cases.push_back({"GetParetoFront", "device." + m.field, [this, m] {
                       v1::GetParetoFrontRequest r;
                       *r.mutable_device() = ValidDevice();
                       *r.mutable_kernel() = ValidKernel();
                       m.apply(*r.mutable_device());
                       v1::GetParetoFrontResponse response;
                       return catalog_->GetParetoFront(ContextWithDeadline(seconds(10)).get(), r,
                                                       &response);
                     }});
    cases.push_back({"SubmitTimings", "device." + m.field, [this, m] {
                       auto r = ValidSubmission();
                       m.apply(*r.mutable_device());
                       v1::SubmitTimingsResponse response;
                       return Submit(r, &response);
                     }});
  }

  // Every RPC that carries a problem, with the problem spoilt by `m`.
  void AddProblemCases(std::vector<BadCall>& cases, const Mutation<v1::ConvProblem>& m) {
    cases.push_back({"GetPlan", "kernels[2].problem." + m.field, [this, m] {
                       auto r = ValidPlanRequest();
                       m.apply(*r.mutable_kernels(2)->mutable_problem());
                       return GetPlan(r);
                     }});
    cases.push_back({"StreamPlan", "request.kernels[0].problem." + m.field, [this, m] {
                       v1::StreamPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       m.apply(*r.mutable_request()->mutable_kernels(0)->mutable_problem());
                       return StreamPlan(r);
                     }});
    cases.push_back({"ExplainPlan", "request.kernels[0].problem." + m.field, [this, m] {
                       v1::ExplainPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       m.apply(*r.mutable_request()->mutable_kernels(0)->mutable_problem());
                       v1::ExplainPlanResponse response;
                       return catalog_->ExplainPlan(ContextWithDeadline(seconds(10)).get(), r,
                                                    &response);
                     }});
    cases.push_back({"GetTimings", "problem." + m.field, [this, m] {
                       v1::GetTimingsRequest r;
                       *r.mutable_device() = ValidDevice();
                       *r.mutable_problem() = ValidProblem();
                       m.apply(*r.mutable_problem());
                       v1::GetTimingsResponse response;
                       return catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), r,
                                                   &response);
                     }});
    cases.push_back({"GetParetoFront", "kernel.problem." + m.field, [this, m] {
                       v1::GetParetoFrontRequest r;
                       *r.mutable_device() = ValidDevice();
                       *r.mutable_kernel() = ValidKernel();
                       m.apply(*r.mutable_kernel()->mutable_problem());
                       v1::GetParetoFrontResponse response;
                       return catalog_->GetParetoFront(ContextWithDeadline(seconds(10)).get(), r,
                                                       &response);
                     }});
    cases.push_back({"SubmitTimings", "problem." + m.field, [this, m] {
                       auto r = ValidSubmission();
                       m.apply(*r.mutable_problem());
                       v1::SubmitTimingsResponse response;
                       return Submit(r, &response);
                     }});
  }

  // Spoils one field of a GetPlanRequest.
  BadCall PlanCase(std::string field, std::function<void(v1::GetPlanRequest&)> mutate) {
    return {"GetPlan", field, [this, mutate] {
              auto r = ValidPlanRequest();
              mutate(r);
              return GetPlan(r);
            }};
  }

  BadCall SubmitCase(std::string field, std::function<void(v1::SubmitTimingsRequest&)> mutate) {
    return {"SubmitTimings", field, [this, mutate] {
              auto r = ValidSubmission();
              mutate(r);
              v1::SubmitTimingsResponse response;
              return Submit(r, &response);
            }};
  }

  BadCall ParetoCase(std::string field, std::function<void(v1::GetParetoFrontRequest&)> mutate) {
    return {"GetParetoFront", field, [this, mutate] {
              v1::GetParetoFrontRequest r;
              *r.mutable_device() = ValidDevice();
              *r.mutable_kernel() = ValidKernel();
              mutate(r);
              v1::GetParetoFrontResponse response;
              return catalog_->GetParetoFront(ContextWithDeadline(seconds(10)).get(), r, &response);
            }};
  }

  BadCall ListJobsCase(std::string field, std::function<void(v1::ListJobsRequest&)> mutate) {
    return {"ListJobs", field, [this, mutate] {
              v1::ListJobsRequest r;
              mutate(r);
              v1::ListJobsResponse response;
              return catalog_->ListJobs(ContextWithDeadline(seconds(10)).get(), r, &response);
            }};
  }

  std::vector<BadCall> AllCases() {
    std::vector<BadCall> cases;
    for (const auto& m : DeviceMutations()) AddDeviceCases(cases, m);
    for (const auto& m : ProblemMutations()) AddProblemCases(cases, m);

    // GetPlanRequest's own fields.
    cases.push_back(PlanCase("device", [](auto& r) { r.clear_device(); }));
    cases.push_back(PlanCase("kernels", [](auto& r) { r.clear_kernels(); }));
    cases.push_back(PlanCase("kernels", [](auto& r) {
      while (r.kernels_size() <= kMaxKernelsPerRequest) *r.add_kernels() = r.kernels(0);
    }));
    cases.push_back(
        PlanCase("kernels[1].problem", [](auto& r) { r.mutable_kernels(1)->clear_problem(); }));
    cases.push_back(PlanCase("kernels[0].mini_batch",
                             [](auto& r) { r.mutable_kernels(0)->set_mini_batch(0); }));
    cases.push_back(PlanCase("kernels[3].mini_batch",
                             [](auto& r) { r.mutable_kernels(3)->set_mini_batch(-8); }));
    cases.push_back(PlanCase("kernels[4].mini_batch",
                             [](auto& r) { r.mutable_kernels(4)->set_mini_batch(65537); }));
    cases.push_back(PlanCase("kernels[1].name", [](auto& r) {
      r.mutable_kernels(1)->set_name(std::string(kMaxKernelNameBytes + 1, 'n'));
    }));
    cases.push_back(
        PlanCase("policy", [](auto& r) { r.set_policy(static_cast<v1::BatchPolicy>(7)); }));
    cases.push_back(PlanCase("workspace_mode", [](auto& r) {
      r.set_workspace_mode(static_cast<v1::WorkspaceMode>(-1));
    }));
    cases.push_back(PlanCase("workspace_bytes",
                             [](auto& r) { r.set_workspace_bytes(kMaxWorkspaceBytes + 1); }));
    cases.push_back(PlanCase("workspace_bytes", [](auto& r) {
      r.set_workspace_bytes(std::numeric_limits<uint64_t>::max());
    }));
    cases.push_back(PlanCase("max_wait_ms", [](auto& r) { r.set_max_wait_ms(kMaxWaitMs + 1); }));
    // Valid for the message (uint64), but no database column holds it: refused before writing.
    cases.push_back(PlanCase("device.memory_bytes", [](auto& r) {
      r.mutable_device()->set_memory_bytes(std::numeric_limits<uint64_t>::max());
    }));
    // Not UTF-8 in a proto3 string: the message does not even parse.
    cases.push_back(PlanCase(
        "request", [](auto& r) { r.mutable_kernels(0)->set_name(std::string("\xff\xfe", 2)); }));

    cases.push_back({"StreamPlan", "request", [this] { return StreamPlan({}); }});
    cases.push_back({"StreamPlan", "request.kernels[0].mini_batch", [this] {
                       v1::StreamPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       r.mutable_request()->mutable_kernels(0)->set_mini_batch(0);
                       return StreamPlan(r);
                     }});
    cases.push_back({"ExplainPlan", "request", [this] {
                       v1::ExplainPlanResponse response;
                       return catalog_->ExplainPlan(ContextWithDeadline(seconds(10)).get(),
                                                    v1::ExplainPlanRequest(), &response);
                     }});
    cases.push_back({"ExplainPlan", "request.kernels", [this] {
                       v1::ExplainPlanRequest r;
                       *r.mutable_request() = ValidPlanRequest();
                       r.mutable_request()->clear_kernels();
                       v1::ExplainPlanResponse response;
                       return catalog_->ExplainPlan(ContextWithDeadline(seconds(10)).get(), r,
                                                    &response);
                     }});

    // GetTimings / GetParetoFront.
    cases.push_back({"GetTimings", "device", [this] {
                       v1::GetTimingsRequest r;
                       *r.mutable_problem() = ValidProblem();
                       v1::GetTimingsResponse response;
                       return catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), r,
                                                   &response);
                     }});
    cases.push_back({"GetTimings", "problem", [this] {
                       v1::GetTimingsRequest r;
                       *r.mutable_device() = ValidDevice();
                       v1::GetTimingsResponse response;
                       return catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), r,
                                                   &response);
                     }});
    cases.push_back(ParetoCase("device", [](auto& r) { r.clear_device(); }));
    cases.push_back(ParetoCase("kernel", [](auto& r) { r.clear_kernel(); }));
    cases.push_back(
        ParetoCase("kernel.problem", [](auto& r) { r.mutable_kernel()->clear_problem(); }));
    cases.push_back(
        ParetoCase("kernel.mini_batch", [](auto& r) { r.mutable_kernel()->set_mini_batch(0); }));
    cases.push_back(ParetoCase("kernel.name", [](auto& r) {
      r.mutable_kernel()->set_name(std::string(kMaxKernelNameBytes + 1, 'n'));
    }));
    cases.push_back(
        ParetoCase("policy", [](auto& r) { r.set_policy(static_cast<v1::BatchPolicy>(99)); }));

    // SubmitTimingsRequest: its fields and every field of a timing.
    cases.push_back(SubmitCase("device", [](auto& r) { r.clear_device(); }));
    cases.push_back(SubmitCase("problem", [](auto& r) { r.clear_problem(); }));
    cases.push_back(SubmitCase("timings", [](auto& r) { r.clear_timings(); }));
    cases.push_back(SubmitCase("device.memory_bytes", [](auto& r) {
      r.mutable_device()->set_memory_bytes(uint64_t{1} << 63);
    }));
    cases.push_back({"GetTimings", "device.memory_bytes", [this] {
                       v1::GetTimingsRequest r;
                       *r.mutable_device() = ValidDevice();
                       r.mutable_device()->set_memory_bytes(uint64_t{1} << 63);
                       *r.mutable_problem() = ValidProblem();
                       v1::GetTimingsResponse response;
                       return catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), r,
                                                   &response);
                     }});
    cases.push_back(SubmitCase("timings[0].micro_batch",
                               [](auto& r) { r.mutable_timings(0)->set_micro_batch(0); }));
    cases.push_back(SubmitCase("timings[1].micro_batch",
                               [](auto& r) { r.mutable_timings(1)->set_micro_batch(65537); }));
    cases.push_back(
        SubmitCase("timings[2].algo", [](auto& r) { r.mutable_timings(2)->set_algo(-1); }));
    cases.push_back(SubmitCase("timings[1].engine_config", [](auto& r) {  // not canonical
      r.mutable_timings(1)->set_algo(-1);
      r.mutable_timings(1)->set_engine_config("eng1{k2=1;k1=1}");
    }));
    cases.push_back(SubmitCase("timings[1].algo", [](auto& r) {  // an engine's algo is -1
      r.mutable_timings(1)->set_engine_config("eng1");
    }));
    cases.push_back(
        SubmitCase("timings[0].time_ms", [](auto& r) { r.mutable_timings(0)->set_time_ms(-1); }));
    cases.push_back(SubmitCase("timings[0].time_ms", [](auto& r) {
      r.mutable_timings(0)->set_time_ms(std::numeric_limits<double>::quiet_NaN());
    }));
    cases.push_back(SubmitCase("timings[0].time_ms", [](auto& r) {
      r.mutable_timings(0)->set_time_ms(std::numeric_limits<double>::infinity());
    }));
    cases.push_back(  // OK needs a positive time
        SubmitCase("timings[0].time_ms", [](auto& r) { r.mutable_timings(0)->set_time_ms(0); }));
    cases.push_back(SubmitCase("timings[1].spread_ms", [](auto& r) {
      r.mutable_timings(1)->set_spread_ms(-std::numeric_limits<double>::infinity());
    }));
    cases.push_back(
        SubmitCase("timings[1].samples", [](auto& r) { r.mutable_timings(1)->set_samples(-1); }));
    cases.push_back(SubmitCase("timings[0].status", [](auto& r) {
      r.mutable_timings(0)->set_status(v1::TIMING_STATUS_UNSPECIFIED);
    }));
    cases.push_back(SubmitCase("timings[0].status", [](auto& r) {
      r.mutable_timings(0)->set_status(static_cast<v1::TimingStatus>(42));
    }));
    cases.push_back(SubmitCase("timings[2].error", [](auto& r) {
      r.mutable_timings(2)->set_error(std::string(kMaxMessageBytes + 1, 'e'));
    }));
    cases.push_back(SubmitCase("timings[0].workspace_bytes", [](auto& r) {
      r.mutable_timings(0)->set_workspace_bytes(std::numeric_limits<uint64_t>::max());
    }));
    cases.push_back(SubmitCase("timings[2]", [](auto& r) {  // the same (micro_batch, algo) twice
      r.mutable_timings(2)->set_algo(r.timings(0).algo());
    }));
    cases.push_back(
        SubmitCase("measured_by", [](auto& r) { r.set_measured_by(std::string(129, 'm')); }));

    // ListJobs.
    cases.push_back(ListJobsCase("state", [](auto& r) { r.set_state("bogus"); }));
    cases.push_back(ListJobsCase("state", [](auto& r) { r.set_state("QUEUED; DROP TABLE jobs"); }));
    cases.push_back(ListJobsCase("limit", [](auto& r) { r.set_limit(-1); }));
    cases.push_back(ListJobsCase("limit", [](auto& r) { r.set_limit(10001); }));
    return cases;
  }

  ServerProcess* server_ = nullptr;
  std::unique_ptr<v1::PlannerService::Stub> planner_;
  std::unique_ptr<v1::CatalogService::Stub> catalog_;
  std::unique_ptr<v1::TimingService::Stub> timings_;
  std::unique_ptr<v1::TimingService::Stub> anonymous_timings_;
};

TEST_F(BadInputTest, EveryMalformedFieldIsInvalidArgumentNamingItAndWritesNothing) {
  const auto cases = AllCases();
  ASSERT_GT(cases.size(), 250u);
  RowCounter counter(url());
  auto before = counter.Count();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_GT(before->at("timings"), 0);
  ASSERT_GT(before->at("jobs"), 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadCall& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.what + " with a bad " + c.field);
    const grpc::Status status = c.call();
    EXPECT_EQ(status.error_code(), c.code) << Describe(status);
    EXPECT_THAT(status.error_message(), StartsWith(c.field)) << Describe(status);
    auto after = counter.Count();
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    ASSERT_EQ(*after, *before) << "a rejected request wrote rows";
  }
  EXPECT_TRUE(server_->process().Running());
}

TEST_F(BadInputTest, SeveralMalformedFieldsAreNamedInOneInvalidArgument) {
  RowCounter counter(url());
  auto before = counter.Count();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  auto request = ValidPlanRequest();
  request.mutable_device()->set_backend("tpu");
  request.mutable_kernels(0)->mutable_problem()->set_c(0);
  request.mutable_kernels(1)->mutable_problem()->set_stride_h(-1);
  request.mutable_kernels(1)->set_name(std::string(kMaxKernelNameBytes + 1, 'n'));
  request.set_max_wait_ms(kMaxWaitMs + 1);
  const grpc::Status status = GetPlan(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
  EXPECT_THAT(status.error_message(), StartsWith("5 invalid fields: device.backend: "));
  for (const char* field : {"kernels[0].problem.c: ", "kernels[1].problem.stride_h: ",
                            "kernels[1].name: ", "max_wait_ms: "}) {
    EXPECT_THAT(status.error_message(), HasSubstr(field));
  }
  auto after = counter.Count();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(*after, *before);
  EXPECT_TRUE(server_->process().Running());
}

TEST_F(BadInputTest, SubmissionsWithoutTheTokenAreUnauthenticatedEvenWhenMalformed) {
  auto before = CountRows(url());
  ASSERT_TRUE(before.ok());
  v1::SubmitTimingsResponse response;
  auto status = Submit(ValidSubmission(), &response, /*with_token=*/false);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(status);
  auto malformed = ValidSubmission();
  malformed.clear_device();
  status = Submit(malformed, &response, /*with_token=*/false);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(status);
  auto context = ContextWithDeadline(seconds(10));
  context->AddMetadata("authorization", "Bearer wrong-token");
  status = timings_->SubmitTimings(context.get(), ValidSubmission(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(status);
  auto after = CountRows(url());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
}

TEST_F(BadInputTest, OversizedMessagesAreResourceExhaustedAndWriteNothing) {
  auto before = CountRows(url());
  ASSERT_TRUE(before.ok());
  // Each request well above the server's 1 MiB limit (and valid otherwise).
  auto huge_submission = ValidSubmission();
  huge_submission.clear_timings();
  for (int i = 0; i < 60000; ++i) {
    v1::Timing* t = huge_submission.add_timings();
    t->set_micro_batch(1 + i / 3);
    t->set_algo(i % 3);
    t->set_time_ms(1.0);
    t->set_status(v1::TIMING_STATUS_OK);
    t->set_error(std::string(16, 'x'));
  }
  ASSERT_GT(huge_submission.ByteSizeLong(), kServerMaxMessageBytes);
  v1::SubmitTimingsResponse submitted;
  auto status = Submit(huge_submission, &submitted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << Describe(status);

  auto huge_plan = ValidPlanRequest();
  while (huge_plan.ByteSizeLong() <= kServerMaxMessageBytes) {
    huge_plan.mutable_kernels(0)->mutable_name()->append(1 << 16, 'k');
  }
  status = GetPlan(huge_plan);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << Describe(status);

  v1::StreamPlanRequest huge_stream;
  *huge_stream.mutable_request() = huge_plan;
  status = StreamPlan(huge_stream);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << Describe(status);

  v1::GetTimingsRequest huge_timings;
  *huge_timings.mutable_device() = ValidDevice();
  huge_timings.mutable_device()->set_name(std::string(2 * kServerMaxMessageBytes, 'n'));
  *huge_timings.mutable_problem() = ValidProblem();
  v1::GetTimingsResponse timings;
  status = catalog_->GetTimings(ContextWithDeadline(seconds(10)).get(), huge_timings, &timings);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << Describe(status);

  auto after = CountRows(url());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  // The same channel still works for a proper request.
  status = GetPlan(PlanRequestFor(TinyNetwork(), 0));
  EXPECT_TRUE(status.ok()) << Describe(status);
  EXPECT_TRUE(server_->process().Running());
}

// A raw TCP connection to the server's port.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool connected() const { return fd_ >= 0; }
  // Sends what the peer accepts (it may close the connection half-way: not an error here).
  void Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }
  // Reads until the peer closes or `limit` passes; what arrived.
  std::string Drain(milliseconds limit) {
    std::string received;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    char buffer[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      received.append(buffer, static_cast<size_t>(n));
    }
    return received;
  }

 private:
  int fd_ = -1;
};

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string bytes(n, '\0');
  for (auto& b : bytes) b = static_cast<char>(rng() & 0xff);
  return bytes;
}

// An HTTP/2 frame header: 24-bit length, type, flags, 31-bit stream id.
std::string FrameHeader(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  std::string h(9, '\0');
  h[0] = static_cast<char>((length >> 16) & 0xff);
  h[1] = static_cast<char>((length >> 8) & 0xff);
  h[2] = static_cast<char>(length & 0xff);
  h[3] = static_cast<char>(type);
  h[4] = static_cast<char>(flags);
  h[5] = static_cast<char>((stream >> 24) & 0x7f);
  h[6] = static_cast<char>((stream >> 16) & 0xff);
  h[7] = static_cast<char>((stream >> 8) & 0xff);
  h[8] = static_cast<char>(stream & 0xff);
  return h;
}

TEST_F(BadInputTest, RandomBytesOnThePortLeaveTheServerHealthy) {
  auto before = CountRows(url());
  ASSERT_TRUE(before.ok());
  std::mt19937_64 rng(20240501);
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  {
    // Garbage of many sizes, one connection each.
    for (size_t size : {1, 7, 24, 100, 4096, 65536, 1 << 20}) {
      RawConnection connection(server_->port());
      ASSERT_TRUE(connection.connected());
      connection.Send(RandomBytes(rng, size));
      connection.Drain(milliseconds(100));
    }
  }
  {
    // Plain HTTP/1.1.
    RawConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    connection.Send("GET /ucudnn.v1.PlannerService/GetPlan HTTP/1.1\r\nHost: x\r\n\r\n");
    connection.Drain(milliseconds(200));
  }
  {
    // A valid preface, then random frames; then a frame of a random type with a huge length.
    for (int i = 0; i < 20; ++i) {
      RawConnection connection(server_->port());
      ASSERT_TRUE(connection.connected());
      const size_t length = rng() % 2000;
      connection.Send(preface + FrameHeader(0, 4, 0, 0) +  // empty SETTINGS
                      FrameHeader(static_cast<uint32_t>(length), static_cast<uint8_t>(rng() % 10),
                                  static_cast<uint8_t>(rng()), static_cast<uint32_t>(rng())) +
                      RandomBytes(rng, length));
      connection.Drain(milliseconds(50));
    }
    RawConnection connection(server_->port());
    ASSERT_TRUE(connection.connected());
    connection.Send(preface + FrameHeader(0, 4, 0, 0) + FrameHeader(0xffffff, 1, 0x4, 1) +
                    RandomBytes(rng, 1000));
    connection.Drain(milliseconds(100));
  }
  // Idle connections held open while a real client is served.
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->port()));
    if (i % 2 == 0) idle.back()->Send(preface.substr(0, 10));
  }

  // Well-framed gRPC calls whose bodies are random bytes, to every method.
  grpc::GenericStub generic(server_->NewChannel());
  const std::vector<std::string> methods = {
      "/ucudnn.v1.PlannerService/GetPlan",      "/ucudnn.v1.PlannerService/StreamPlan",
      "/ucudnn.v1.CatalogService/ListDevices",  "/ucudnn.v1.CatalogService/ListJobs",
      "/ucudnn.v1.CatalogService/GetTimings",   "/ucudnn.v1.CatalogService/GetParetoFront",
      "/ucudnn.v1.CatalogService/ExplainPlan",  "/ucudnn.v1.TimingService/SubmitTimings",
      "/ucudnn.v1.PlannerService/NoSuchMethod",
  };
  int refused = 0;
  for (const auto& method : methods) {
    for (int i = 0; i < 8; ++i) {
      const std::string body = RandomBytes(rng, 1 + rng() % 3000);
      grpc::Slice slice(body);
      grpc::ByteBuffer request(&slice, 1);
      grpc::ByteBuffer response;
      auto context = ContextWithDeadline(seconds(10));
      context->AddMetadata("authorization", std::string("Bearer ") + kToken);
      std::promise<grpc::Status> done;
      generic.UnaryCall(context.get(), method, grpc::StubOptions(), &request, &response,
                        [&done](grpc::Status s) { done.set_value(std::move(s)); });
      const grpc::Status status = done.get_future().get();
      // Random bytes rarely parse; when they do, the message is validated like any other.
      if (!status.ok()) ++refused;
      EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << method << Describe(status);
      if (method == "/ucudnn.v1.PlannerService/GetPlan") {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << Describe(status);
      }
    }
  }
  EXPECT_GT(refused, static_cast<int>(methods.size()));

  // Still healthy, still serving, nothing written.
  EXPECT_TRUE(server_->process().Running()) << server_->process().LogTail();
  auto health = grpc::health::v1::Health::NewStub(server_->NewChannel());
  grpc::health::v1::HealthCheckRequest health_request;
  grpc::health::v1::HealthCheckResponse health_response;
  auto status =
      health->Check(ContextWithDeadline(seconds(5)).get(), health_request, &health_response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  EXPECT_EQ(health_response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  v1::GetPlanResponse plan;
  status = planner_->GetPlan(ContextWithDeadline(seconds(10)).get(),
                             PlanRequestFor(TinyNetwork(), 0), &plan);
  EXPECT_TRUE(status.ok()) << Describe(status);
  auto after = CountRows(url());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
}

}  // namespace
}  // namespace ucudnn::e2e
