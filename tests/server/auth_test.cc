#include "ucudnn/server/auth.h"

#include <gtest/gtest.h>

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

TEST(AuthTest, BearerTokens) {
  TokenAuthenticator auth({"tok-1", "", "tok-2"});
  EXPECT_TRUE(auth.has_tokens());
  EXPECT_TRUE(auth.Check("Bearer tok-1").ok());
  EXPECT_TRUE(auth.Check("bearer tok-2").ok());
  EXPECT_TRUE(auth.Check("Bearer  tok-2 ").ok());
  EXPECT_EQ(auth.Check("").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Bearer").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Bearer ").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Basic tok-1").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Bearer tok-3").code(), StatusCode::kUnauthenticated);
  // The refusal never echoes what was presented.
  EXPECT_EQ(auth.Check("Bearer guess").message().find("guess"), std::string::npos);
}

TEST(AuthTest, NoTokensRefusesEverything) {
  TokenAuthenticator auth({"", ""});
  EXPECT_FALSE(auth.has_tokens());
  EXPECT_EQ(auth.Check("Bearer ").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(auth.Check("Bearer anything").code(), StatusCode::kUnauthenticated);
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
