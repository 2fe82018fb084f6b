// A kernel's own workspace limit through grpcurl's JSON ("workspaceLimitBytes"), against the real
// server: the plan echoes it, and an out-of-range or misplaced one is INVALID_ARGUMENT naming the
// field. grpcurl runs through `buf curl` (tests/tools/grpcurl_via_buf.sh), skipped without buf.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "e2e/e2e_fixture.h"

namespace ucudnn::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class KernelLimitsJsonTest : public BufE2eTest {
 protected:
  // GetPlan with a cpu device, one kernel whose JSON members end in `extra_kernel`, and the
  // request members `extra_request`; the exit code and everything printed.
  std::pair<int, std::string> GetPlan(const std::string& server, const std::string& extra_kernel,
                                      const std::string& extra_request) {
    const std::string body =
        R"({"device":{"backend":"cpu","name":"json cpu","smCount":2,"memoryBytes":"1073741824"},)"
        R"("kernels":[{"name":"k0","miniBatch":"4","problem":{"op":"CONV_OP_FORWARD","c":"8",)"
        R"("h":"8","w":"8","k":"8","r":"3","s":"3","padH":"1","padW":"1"})" +
        extra_kernel + R"(}],"workspaceBytes":"67108864","maxWaitMs":0)" + extra_request + "}";
    const std::string script = "printf '%s' '" + body + "' | '" + UCUDNN_SOURCE_DIR +
                               "/tests/tools/grpcurl_via_buf.sh' -plaintext -d @ " + server +
                               " ucudnn.v1.PlannerService/GetPlan";
    std::string error;
    auto process = ChildProcess::Spawn({"/usr/bin/env", "BUF=" + buf_, "/bin/bash", "-c", script},
                                       LogPath("getplan" + std::to_string(++calls_)), &error);
    EXPECT_NE(process, nullptr) << error;
    if (process == nullptr) return {-1, ""};
    const std::optional<int> status = process->WaitExit(seconds(60));
    EXPECT_TRUE(status.has_value()) << process->LogTail();
    const int code = status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
    std::string log = process->Log();
    std::remove(process->log_path().c_str());
    return {code, log};
  }

  int calls_ = 0;
};

TEST_F(KernelLimitsJsonTest, KernelLimitRoundTripsAndBadOnesAreNamed) {
  ServerProcess* server = StartServer("s1");
  ASSERT_NE(server, nullptr);
  const auto [ok_code, ok] = GetPlan(server->address(), R"(,"workspaceLimitBytes":"1048576")", "");
  EXPECT_EQ(ok_code, 0) << ok;
  EXPECT_THAT(ok, HasSubstr(R"("workspaceLimitBytes": "1048576")"));
  EXPECT_THAT(ok, Not(HasSubstr("invalid_argument")));
  // The same request but for the kernel's limit is never answered from the first one's plan.
  const auto [other_code, other] =
      GetPlan(server->address(), R"(,"workspaceLimitBytes":"2097152")", "");
  EXPECT_EQ(other_code, 0) << other;
  EXPECT_THAT(other, HasSubstr(R"("workspaceLimitBytes": "2097152")"));
  EXPECT_THAT(other, Not(HasSubstr("1048576")));

  const auto [over_code, over] =
      GetPlan(server->address(), R"(,"workspaceLimitBytes":"1099511627777")", "");
  EXPECT_NE(over_code, 0);
  EXPECT_THAT(over, HasSubstr("invalid_argument"));
  EXPECT_THAT(over, HasSubstr("kernels[0].workspace_limit_bytes: must be at most 1 TiB, got "
                              "1099511627777"));

  const auto [sum_code, sum] = GetPlan(server->address(), R"(,"workspaceLimitBytes":"1048576")",
                                       R"(,"workspaceMode":"WORKSPACE_MODE_TOTAL_SUM")");
  EXPECT_NE(sum_code, 0);
  EXPECT_THAT(sum, HasSubstr("invalid_argument"));
  EXPECT_THAT(sum, HasSubstr("kernels[0].workspace_limit_bytes: only in "
                             "WORKSPACE_MODE_PER_KERNEL, not WORKSPACE_MODE_TOTAL_SUM"));
}

}  // namespace
}  // namespace ucudnn::e2e
