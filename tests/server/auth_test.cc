#include "ucudnn/server/auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ucudnn/server/grpc_status.h"

namespace ucudnn::server {
namespace {

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret1", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secre", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  // A repeated prefix must not pass for the token (the presented string is read cyclically).
  EXPECT_FALSE(ConstantTimeEquals("ab", "abab"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));
}

TEST(AuthTest, BearerTokensGiveTheirRole) {
  TokenAuthenticator auth(RoleTokens{{"tok-admin", ""}, {"tok-plan"}, {"tok-submit"}, {"tok-read"}},
                          AnonymousAccess{true, Role::kRead});
  EXPECT_TRUE(auth.has_tokens());
  EXPECT_EQ(auth.Identify("Bearer tok-admin")->role, Role::kAdmin);
  EXPECT_EQ(auth.Identify("bearer tok-plan")->role, Role::kPlan);
  EXPECT_EQ(auth.Identify("Bearer  tok-submit ")->role, Role::kSubmit);
  EXPECT_EQ(auth.Identify("Bearer tok-read")->role, Role::kRead);
  EXPECT_EQ(auth.Identify("")->role, Role::kRead);  // no token: the anonymous role
  for (const char* bad : {"Bearer", "Bearer ", "Basic tok-admin", "Bearer tok-3", "tok-admin"}) {
    EXPECT_EQ(auth.Identify(bad).status().code(), StatusCode::kUnauthenticated) << bad;
  }
  // The refusal never echoes what was presented.
  EXPECT_EQ(auth.Identify("Bearer guess").status().message().find("guess"), std::string::npos);
}

TEST(AuthTest, AnonymousAccessIsConfigurable) {
  // The default: read, and register nothing.
  EXPECT_EQ(TokenAuthenticator({"t"}).Identify("")->role, Role::kRead);
  EXPECT_FALSE(TokenAuthenticator({"t"}).Identify("")->may_register_devices);
  // As before roles existed: plan, and register devices by planning for them.
  const TokenAuthenticator open(RoleTokens{{"t"}, {}, {}, {}}, *ParseAnonymousRole("open"));
  EXPECT_EQ(open.Identify("")->role, Role::kPlan);
  EXPECT_TRUE(open.Identify("")->may_register_devices);
  const TokenAuthenticator plan(RoleTokens{{"t"}, {"p"}, {}, {}}, *ParseAnonymousRole("plan"));
  EXPECT_EQ(plan.Identify("")->role, Role::kPlan);
  EXPECT_FALSE(plan.Identify("")->may_register_devices);
  EXPECT_FALSE(plan.Identify("Bearer p")->may_register_devices);
  EXPECT_TRUE(plan.Identify("Bearer t")->may_register_devices);
  TokenAuthenticator closed(RoleTokens{{"t"}, {}, {}, {}}, *ParseAnonymousRole("none"));
  EXPECT_EQ(closed.Identify("").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(closed.Identify("Bearer t")->role, Role::kAdmin);
  EXPECT_EQ(TokenAuthenticator(RoleTokens{}, *ParseAnonymousRole("read")).Identify("")->role,
            Role::kRead);
  EXPECT_EQ(ParseAnonymousRole("admin").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseAnonymousRole("open")->registers_devices);
  EXPECT_EQ(ParseAnonymousRole("").status().code(), StatusCode::kInvalidArgument);
}

TEST(AuthTest, Permissions) {
  EXPECT_FALSE(MayEnqueue(Role::kRead));
  EXPECT_TRUE(MayEnqueue(Role::kPlan));
  EXPECT_FALSE(MayEnqueue(Role::kSubmit));
  EXPECT_TRUE(MayEnqueue(Role::kAdmin));
  EXPECT_FALSE(MayRegisterDevices(Role::kPlan));
  EXPECT_TRUE(MayRegisterDevices(Role::kSubmit));
  EXPECT_FALSE(MaySubmitTimings(Role::kPlan));
  EXPECT_TRUE(MaySubmitTimings(Role::kSubmit));
  EXPECT_FALSE(MayRetryJobs(Role::kSubmit));
  EXPECT_TRUE(MayRetryJobs(Role::kAdmin));
}

TEST(AuthTest, TokenFileWithRoles) {
  const std::string path =
      ::testing::TempDir() + "/ucudnn-role-tokens-" + std::to_string(::getpid()) + ".txt";
  {
    std::ofstream out(path);
    out << "# tokens\nold-admin\n  plan   p-1 \nsubmit s-1\nadmin a-1\nread r-1\n\n";
  }
  auto tokens = ReadTokenFile(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->admin, (std::vector<std::string>{"old-admin", "a-1"}));
  EXPECT_EQ(tokens->plan, (std::vector<std::string>{"p-1"}));
  EXPECT_EQ(tokens->submit, (std::vector<std::string>{"s-1"}));
  EXPECT_EQ(tokens->read, (std::vector<std::string>{"r-1"}));
  {
    std::ofstream out(path);
    out << "ok-token\nroot x\n";
  }
  auto bad = ReadTokenFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  std::remove(path.c_str());
}

TEST(AuthTest, SplitTokenList) {
  EXPECT_EQ(SplitTokenList(" a, b,,c ,"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(SplitTokenList("").empty());
}

TEST(GrpcStatusTest, ServerAnswersThroughTheOneMapping) {
  const grpc::Status status = ToGrpcStatus(InvalidArgument("kernels[2].problem.c: bad"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "kernels[2].problem.c: bad");
  EXPECT_EQ(ToGrpcStatus(Unauthenticated("x")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ToGrpcStatus(Status::Ok()).ok());
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
}

}  // namespace
}  // namespace ucudnn::server
