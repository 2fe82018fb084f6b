// The compiled-plan store's file format and directory (no GPU: the payload is opaque text here),
// and the atomic file helpers under it.
#include "ucudnn/core/compiled_plans.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "ucudnn/core/files.h"

namespace ucudnn {
namespace {

const std::string kKey = "v2;backend=cudnn;name=NVIDIA H100;cc=9.0|v1;op=fwd;c=96|8|0|e=3";
const std::string kPayload = "{\"plan\": \"bytes\\u0000with a NUL\"}\n\x01\x02";

TEST(CompiledPlanFormatTest, RoundTrips) {
  const std::string file = EncodeCompiledPlan(kKey, kPayload);
  EXPECT_EQ(file.rfind("ucudnn-compiled-plan 1\n", 0), 0u) << "head -1 says what the file is";
  Result<std::string> payload = DecodeCompiledPlan(kKey, file);
  ASSERT_TRUE(payload.ok()) << payload.status().ToString();
  EXPECT_EQ(*payload, kPayload);
  std::string binary = "a\0b\nc";  // payloads may hold any byte
  binary.push_back('\0');
  EXPECT_EQ(*DecodeCompiledPlan(kKey, EncodeCompiledPlan(kKey, binary)), binary);
}

TEST(CompiledPlanFormatTest, RefusesWhatIsNotThisPlan) {
  const std::string file = EncodeCompiledPlan(kKey, kPayload);
  const auto refused = [](std::string_view key, std::string_view bytes, std::string_view why) {
    Result<std::string> payload = DecodeCompiledPlan(key, bytes);
    EXPECT_EQ(payload.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_NE(payload.status().message().find(why), std::string::npos)
        << payload.status().message();
  };
  refused(kKey + "x", file, "another plan's key");                // a colliding file name
  refused(kKey, file.substr(0, file.size() - 1), "header says");  // a truncated write
  refused(kKey, file + "x", "header says");
  std::string flipped = file;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  refused(kKey, flipped, "checksum");
  std::string newer = file;
  newer.replace(newer.find(" 1\n"), 3, " 2\n");
  refused(kKey, newer, "format version 1");
  refused(kKey, "", "format version 1");
  refused(kKey, "ucudnn-compiled-plan 1\n" + kKey + "\n", "truncated header");
  refused(kKey, "ucudnn-compiled-plan 1\n" + kKey + "\n99999999999999999999 00\n", "size");
  refused(kKey, "ucudnn-compiled-plan 1\n" + kKey + "\nabc 00\n", "size");
}

class CompiledPlanStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("ucudnn_store_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(CompiledPlanStoreTest, SavesLoadsAndReplaces) {
  const CompiledPlanStore store((dir_ / "nested").string());
  EXPECT_EQ(store.Load(kKey).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store.Save(kKey, kPayload).ok()) << "the directory is created";
  EXPECT_EQ(*store.Load(kKey), kPayload);
  EXPECT_EQ(store.Load(kKey + "2").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store.Save(kKey, "newer").ok());
  EXPECT_EQ(*store.Load(kKey), "newer");
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "nested")) {
    ++files;
    EXPECT_EQ(entry.path().extension(), ".plan") << "no temporary file left: " << entry.path();
  }
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(store.PathOf(kKey).rfind((dir_ / "nested").string() + "/", 0), 0u);

  // A damaged file is reported with its path, not returned.
  std::ofstream(store.PathOf(kKey), std::ios::trunc) << "ucudnn-compiled-plan 1\n";
  Result<std::string> damaged = store.Load(kKey);
  EXPECT_EQ(damaged.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(damaged.status().message().find(store.PathOf(kKey)), std::string::npos);
  EXPECT_EQ(store.Save("two\nlines", "x").code(), StatusCode::kInvalidArgument);
}

TEST_F(CompiledPlanStoreTest, KeepsTheMostRecentlyUsedPlans) {
  namespace fs = std::filesystem;
  const CompiledPlanStore store(dir_.string(), /*max_files=*/2);
  ASSERT_TRUE(store.Save("a", "plan a").ok());
  ASSERT_TRUE(store.Save("b", "plan b").ok());
  // a was saved before b, long ago; loading it makes it the most recently used.
  const auto long_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(store.PathOf("a"), long_ago);
  fs::last_write_time(store.PathOf("b"), long_ago + std::chrono::minutes(1));
  ASSERT_TRUE(store.Load("a").ok());
  ASSERT_TRUE(store.Save("c", "plan c").ok());
  EXPECT_EQ(*store.Load("a"), "plan a");
  EXPECT_EQ(*store.Load("c"), "plan c");
  EXPECT_EQ(store.Load("b").status().code(), StatusCode::kNotFound) << "the least recently used";
  std::ofstream(dir_ / "notes.txt") << "not a plan";  // other files are not counted or removed
  ASSERT_TRUE(store.Save("d", "plan d").ok());
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
  size_t plans = 0;
  for (const auto& entry : fs::directory_iterator(dir_))
    plans += entry.path().extension() == ".plan";
  EXPECT_EQ(plans, 2u);
}

TEST_F(CompiledPlanStoreTest, TellsWhetherPlansCanBeSaved) {
  const CompiledPlanStore store((dir_ / "nested").string());
  EXPECT_TRUE(store.CheckWritable().ok()) << "the directory is created";
  EXPECT_TRUE(std::filesystem::is_empty(dir_ / "nested")) << "the probe file is removed";
  // A directory under a regular file cannot be made.
  std::filesystem::create_directories(dir_);
  { std::ofstream(dir_ / "file") << "x"; }
  const Status refused = CompiledPlanStore((dir_ / "file" / "plans").string()).CheckWritable();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("not writable"));
  EXPECT_TRUE(CompiledPlanStore("").CheckWritable().ok());
}

TEST_F(CompiledPlanStoreTest, AnEmptyDirectoryIsNoStore) {
  const CompiledPlanStore none("");
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Save(kKey, kPayload).ok());
  EXPECT_EQ(none.Load(kKey).status().code(), StatusCode::kNotFound);
}

TEST_F(CompiledPlanStoreTest, FilesAreReplacedWhole) {
  const std::string path = (dir_ / "a" / "b.bin").string();
  EXPECT_EQ(ReadWholeFile(path).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(path, std::string("one\0two", 7)).ok());
  EXPECT_EQ(*ReadWholeFile(path), std::string("one\0two", 7));
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  EXPECT_EQ(*ReadWholeFile(path), "");
  EXPECT_EQ(WriteFileAtomically("", "x").code(), StatusCode::kInvalidArgument);
  // A directory in the way of the file: the write fails and leaves no temporary behind.
  std::filesystem::create_directories(dir_ / "c" / "d.bin" / "inside");
  EXPECT_EQ(WriteFileAtomically((dir_ / "c" / "d.bin").string(), "x").code(),
            StatusCode::kUnavailable);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_ / "c")) {
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

TEST(CachePathsTest, PathSettingsTurnOffOrTrim) {
  for (const char* off : {"off", "OFF", " none ", "0", ""}) EXPECT_EQ(PathSetting(off), "") << off;
  EXPECT_EQ(PathSetting(" /var/cache/ucudnn/plans "), "/var/cache/ucudnn/plans");
  EXPECT_EQ(PathSetting("relative/dir"), "relative/dir");
}

TEST(CachePathsTest, TheUsersCacheFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(UserCachePath("compiled_plans"), "/x/cache/ucudnn/compiled_plans");
  setenv("XDG_CACHE_HOME", "relative", 1);  // not an XDG directory: HOME's .cache
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(UserCachePath("plans.bin"), "/home/u/.cache/ucudnn/plans.bin");
  setenv("HOME", "relative", 1);
  EXPECT_EQ(UserCachePath("plans.bin"), "");
  xdg ? setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1) : unsetenv("XDG_CACHE_HOME");
  home ? setenv("HOME", saved_home.c_str(), 1) : unsetenv("HOME");
}

}  // namespace
}  // namespace ucudnn
