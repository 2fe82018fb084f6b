// Unit tests of the store's pure pieces: hash text, array literals, input checks, the mapping of
// SQLSTATEs to Status codes and the embedded migrations.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "store_test_util.h"
#include "ucudnn/store/migrations.h"
#include "values.h"

namespace ucudnn::store {
namespace {

using testing_util::SampleTimings;

TEST(ConnectionDefaults, AddedUnlessTheUrlSetsThem) {
  auto kv = WithConnectionDefaults("host=127.0.0.1 port=5432 dbname=x keepalives_idle=5");
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  EXPECT_EQ(*kv,
            "host=127.0.0.1 port=5432 dbname=x keepalives_idle=5 connect_timeout=10 "
            "keepalives=1 keepalives_interval=10 keepalives_count=3 tcp_user_timeout=60000");
  auto uri = WithConnectionDefaults("postgresql://u@h:5432/db");
  ASSERT_TRUE(uri.ok());
  EXPECT_EQ(*uri,
            "postgresql://u@h:5432/db?connect_timeout=10&keepalives=1&keepalives_idle=30&"
            "keepalives_interval=10&keepalives_count=3&tcp_user_timeout=60000");
  auto query = WithConnectionDefaults(
      "postgres://h/db?sslmode=disable&connect_timeout=3&keepalives=0&keepalives_idle=1&"
      "keepalives_interval=1&keepalives_count=1");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(*query,
            "postgres://h/db?sslmode=disable&connect_timeout=3&keepalives=0&keepalives_idle=1&"
            "keepalives_interval=1&keepalives_count=1&tcp_user_timeout=60000");
  // Every default given: the URL comes back as it was.
  const std::string full =
      "host=h connect_timeout=1 keepalives=1 keepalives_idle=2 keepalives_interval=3 "
      "keepalives_count=4 tcp_user_timeout=5";
  EXPECT_EQ(*WithConnectionDefaults(full), full);
  // The defaults parse: libpq accepts what comes out.
  EXPECT_TRUE(WithConnectionDefaults(*kv).ok());
  EXPECT_TRUE(WithConnectionDefaults(*uri).ok());
  EXPECT_EQ(WithConnectionDefaults("host='unterminated").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WithConnectionDefaults("postgresql://h/db?nosuchoption=1").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HashText, RoundTripsAndPads) {
  EXPECT_EQ(FormatHash(0x1fULL), "000000000000001f");
  EXPECT_EQ(FormatHash(0xfedcba9876543210ULL), "fedcba9876543210");
  for (uint64_t h : {uint64_t{0}, uint64_t{1}, uint64_t{0xdeadbeefcafef00d},
                     std::numeric_limits<uint64_t>::max()}) {
    auto parsed = ParseHash(FormatHash(h));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, h);
  }
  EXPECT_EQ(*ParseHash("ABC"), 0xabcULL);
  EXPECT_FALSE(ParseHash("").ok());
  EXPECT_FALSE(ParseHash("12345678901234567").ok());
  EXPECT_FALSE(ParseHash("12g4").ok());
  EXPECT_EQ(ParseHash("xyz").status().code(), StatusCode::kInvalidArgument);
}

TEST(HashText, BitCastKeepsEveryValue) {
  for (uint64_t h : {uint64_t{0}, uint64_t{1} << 63, std::numeric_limits<uint64_t>::max()}) {
    EXPECT_EQ(internal::FromDb(internal::ToDb(h)), h);
  }
  EXPECT_LT(internal::ToDb(uint64_t{1} << 63), 0);
}

TEST(JobStateText, RoundTrips) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kDone, JobState::kFailed}) {
    auto parsed = ParseJobState(ToString(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(ParseJobState("Done").status().code(), StatusCode::kInvalidArgument);
}

TEST(ArrayLiterals, QuoteEveryTextElement) {
  EXPECT_EQ(internal::IntArrayLiteral({1, -2, 30}), "{1,-2,30}");
  EXPECT_EQ(internal::IntArrayLiteral({}), "{}");
  EXPECT_EQ(internal::TextArrayLiteral({"ok", "a\"b", "c\\d", "{x,y}", ""}),
            "{\"ok\",\"a\\\"b\",\"c\\\\d\",\"{x,y}\",\"\"}");
  const double third = 1.0 / 3.0;
  const std::string text = internal::DoubleArrayLiteral({third, 2.5});
  EXPECT_EQ(std::stod(text.substr(1, text.find(',') - 1)), third);  // exact round trip
}

TEST(CleanText, DropsNulAndCutsOnCharacterBoundary) {
  EXPECT_EQ(internal::CleanText(std::string("a\0b", 3), 10), "ab");
  // "é" is two bytes; a cut in its middle backs off to before it.
  EXPECT_EQ(internal::CleanText("ab\xC3\xA9", 3), "ab");
  EXPECT_EQ(internal::CleanText("ab\xC3\xA9", 4), "ab\xC3\xA9");
}

TEST(ValidateTimings, NamesTheBadField) {
  std::vector<Timing> timings = SampleTimings(8, 3);
  EXPECT_TRUE(internal::ValidateTimings(timings).ok());

  auto bad = timings;
  bad[2].time_ms = std::nan("");
  Status s = internal::ValidateTimings(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("timings[2].time_ms"), std::string::npos) << s.message();

  bad = timings;
  bad[1].micro_batch = 0;
  EXPECT_NE(internal::ValidateTimings(bad).message().find("timings[1].micro_batch"),
            std::string::npos);

  bad = timings;
  bad[3].workspace_bytes = std::numeric_limits<uint64_t>::max();
  EXPECT_NE(internal::ValidateTimings(bad).message().find("workspace_bytes"), std::string::npos);

  bad = timings;
  bad.push_back(timings[0]);
  EXPECT_NE(internal::ValidateTimings(bad).message().find("duplicate"), std::string::npos);

  EXPECT_EQ(internal::ValidateTimings({}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(internal::ValidateMeasuredBy(std::string(kMaxMeasuredByBytes + 1, 'x')).ok());
  EXPECT_FALSE(internal::ValidateWorkerId("").ok());
  EXPECT_TRUE(internal::ValidateWorkerId("node1:42:0").ok());
  // Shown in tables and logs: control characters are refused (issue 22).
  EXPECT_THAT(internal::ValidateWorkerId("node1\nforged:cpu").message(),
              ::testing::HasSubstr("worker_id: must not contain control characters"));
  EXPECT_THAT(internal::ValidateMeasuredBy("w\x1b[31m").message(),
              ::testing::HasSubstr("measured_by: must not contain control characters"));
}

// A job's workspace limit: a smaller one needs more micro-batch sizes, none needs every size.
TEST(WorkspaceLimits, NoneIsWidestThenTheSmaller) {
  using internal::WidestWorkspaceLimit;
  using internal::WorkspaceLimitCovers;
  using Limit = std::optional<uint64_t>;
  EXPECT_TRUE(WorkspaceLimitCovers(std::nullopt, std::nullopt));
  EXPECT_TRUE(WorkspaceLimitCovers(std::nullopt, Limit(0)));
  EXPECT_TRUE(WorkspaceLimitCovers(std::nullopt, Limit(kMaxJobWorkspaceLimit)));
  EXPECT_FALSE(WorkspaceLimitCovers(Limit(0), std::nullopt));
  EXPECT_FALSE(WorkspaceLimitCovers(Limit(kMaxJobWorkspaceLimit), std::nullopt));
  EXPECT_TRUE(WorkspaceLimitCovers(Limit(1024), Limit(1024)));
  EXPECT_TRUE(WorkspaceLimitCovers(Limit(1024), Limit(4096)));
  EXPECT_FALSE(WorkspaceLimitCovers(Limit(4096), Limit(1024)));
  EXPECT_TRUE(WorkspaceLimitCovers(Limit(0), Limit(1)));

  EXPECT_EQ(WidestWorkspaceLimit(std::nullopt, Limit(5)), std::nullopt);
  EXPECT_EQ(WidestWorkspaceLimit(Limit(5), std::nullopt), std::nullopt);
  EXPECT_EQ(WidestWorkspaceLimit(std::nullopt, std::nullopt), std::nullopt);
  EXPECT_EQ(WidestWorkspaceLimit(Limit(5), Limit(3)), Limit(3));
  EXPECT_EQ(WidestWorkspaceLimit(Limit(3), Limit(5)), Limit(3));
  EXPECT_EQ(WidestWorkspaceLimit(Limit(0), Limit(5)), Limit(0));

  EXPECT_TRUE(internal::ValidateWorkspaceLimit(std::nullopt).ok());
  EXPECT_TRUE(internal::ValidateWorkspaceLimit(0).ok());
  EXPECT_TRUE(internal::ValidateWorkspaceLimit(kMaxJobWorkspaceLimit).ok());
  const Status over = internal::ValidateWorkspaceLimit(kMaxJobWorkspaceLimit + 1);
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(), "workspace_limit: at most 1 TiB (1099511627776), got 1099511627777");
  EXPECT_EQ(kMaxJobWorkspaceLimit, uint64_t{1099511627776});
}

TEST(ErrorMapping, SqlStatesBecomeMeaningfulCodes) {
  auto code = [](const char* state) {
    return internal::MapSqlState("op", state, "ERROR:  boom\nDETAIL: x").status.code();
  };
  EXPECT_EQ(code("53100"), StatusCode::kResourceExhausted);
  EXPECT_EQ(code("25006"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code("23505"), StatusCode::kAlreadyExists);
  EXPECT_EQ(code("23514"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("23503"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("22003"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("08006"), StatusCode::kUnavailable);
  EXPECT_EQ(code("57P01"), StatusCode::kUnavailable);
  EXPECT_EQ(code("40001"), StatusCode::kUnavailable);
  EXPECT_EQ(code("42P01"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code("57014"), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(code("XX000"), StatusCode::kInternal);

  EXPECT_TRUE(internal::MapSqlState("op", "57P01", "bye").connection_lost);
  EXPECT_FALSE(internal::MapSqlState("op", "23505", "dup").connection_lost);
  const auto disk = internal::MapSqlState("put timings", "53100", "ERROR:  could not extend\n");
  EXPECT_EQ(disk.status.message(), "put timings: database disk is full: could not extend");
  const auto read_only = internal::MapSqlState("x", "25006", "cannot execute INSERT");
  EXPECT_NE(read_only.status.message().find("read-only"), std::string::npos);
}

TEST(EmbeddedMigrations, NumberedFromOneWithoutGaps) {
  const auto& migrations = EmbeddedMigrations();
  ASSERT_GE(migrations.size(), 3u);
  for (size_t i = 0; i < migrations.size(); ++i) {
    EXPECT_EQ(migrations[i].version, static_cast<int>(i) + 1);
    EXPECT_FALSE(migrations[i].sql.empty());
  }
  EXPECT_EQ(migrations[0].name, "0001_init");
  EXPECT_NE(migrations[0].sql.find("CREATE TABLE timings"), std::string::npos);
  EXPECT_EQ(Store::LatestSchemaVersion(), migrations.back().version);
}

// Redaction parses the string as libpq does, so no spelling of the password slips through.
TEST(RedactConnectionString, HidesThePasswordInEveryForm) {
  // Each case: the string, then key=value pairs its redaction shows (libpq's order).
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"postgresql://user:s3cret@db:5432/x",
       {"user=user", "password=***", "dbname=x", "host=db", "port=5432"}},
      {"postgres://user:s%33cret@db/x?sslmode=require",
       {"user=user", "password=***", "dbname=x", "host=db", "sslmode=require"}},
      {"postgresql://user@db/x?password=s3cret", {"user=user", "password=***", "host=db"}},
      {"host=db password=s3cret dbname=x", {"password=***", "dbname=x", "host=db"}},
      {"host=x password = 'p w' dbname=y", {"password=***", "dbname=y", "host=x"}},
      {"host=x   password='it\\'s' user='a b'", {"user='a b'", "password=***", "host=x"}},
      {"host=x sslpassword=s3cret", {"host=x", "sslpassword=***"}},
  };
  for (const auto& [url, shown] : cases) {
    const std::string redacted = RedactConnectionString(url);
    for (const auto& pair : shown) {
      EXPECT_NE(redacted.find(pair), std::string::npos) << url << " -> " << redacted;
    }
    for (const char* secret : {"s3cret", "s%33cret", "p w", "it"}) {
      EXPECT_EQ(redacted.find(std::string("=") + secret), std::string::npos)
          << url << " -> " << redacted;
    }
  }
  // Without a secret the string is shown as given.
  EXPECT_EQ(RedactConnectionString("postgresql://user@db/x"), "postgresql://user@db/x");
  EXPECT_EQ(RedactConnectionString("host=db dbname=x"), "host=db dbname=x");
  // libpq cannot parse it: nothing of it is echoed.
  EXPECT_EQ(RedactConnectionString("host=db password 's3cret"), "<unparseable connection string>");
  EXPECT_EQ(RedactConnectionString("postgresql://u:s3cret@[::1/x"),
            "<unparseable connection string>");
}

}  // namespace
}  // namespace ucudnn::store
