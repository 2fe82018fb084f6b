// ClientConfig: environment variables and option strings.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>

#include "config_internal.h"
#include "ucudnn/client/config.h"
#include "ucudnn/client/stats.h"

namespace ucudnn::testing {
namespace {

using client::ApplySettings;

client::SettingLookup Lookup(std::map<std::string, std::string> values) {
  return [values](const char* name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ClientConfigTest, DefaultsAreSafe) {
  ClientConfig config;
  EXPECT_TRUE(config.enabled);
  EXPECT_TRUE(config.server.empty());
  EXPECT_EQ(config.policy, ClientConfig::BatchPolicy::kPowerOfTwo);
  EXPECT_EQ(config.workspace_mode, ClientConfig::WorkspaceMode::kPerKernel);
  EXPECT_EQ(config.workspace_bytes, 0u);
  EXPECT_GT(config.deadline_ms, 0);
  EXPECT_FALSE(config.tls);
  EXPECT_TRUE(config.ca_file.empty());
  EXPECT_FALSE(config.contribute);
}

TEST(ClientConfigTest, TlsAndContribution) {
  ClientConfig config;
  std::vector<std::string> warnings;
  ApplySettings(Lookup({{"UCUDNN_TLS", "1"}, {"UCUDNN_CONTRIBUTE", "yes"}}), &config, &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(config.tls);
  EXPECT_TRUE(config.contribute);

  // A CA file turns TLS on by itself.
  ClientConfig with_ca;
  ApplySettings(Lookup({{"UCUDNN_CA_FILE", " /etc/ucudnn/ca.pem "}}), &with_ca, &warnings);
  EXPECT_TRUE(with_ca.tls);
  EXPECT_EQ(with_ca.ca_file, "/etc/ucudnn/ca.pem");

  ClientConfig bad;
  ApplySettings(Lookup({{"UCUDNN_TLS", "maybe"}, {"UCUDNN_CONTRIBUTE", "sometimes"}}), &bad,
                &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_FALSE(bad.tls);
  EXPECT_FALSE(bad.contribute);

  std::vector<std::string> option_warnings;
  const ClientConfig options =
      ClientConfig{}.WithOptions("UCUDNN_TLS=1;UCUDNN_CONTRIBUTE=1", &option_warnings);
  EXPECT_TRUE(option_warnings.empty()) << option_warnings.front();
  EXPECT_TRUE(options.tls);
  EXPECT_TRUE(options.contribute);
}

TEST(ClientConfigTest, FrameworkIdentityIsReadTrimmedAndKeptAsGiven) {
  std::vector<std::string> warnings;
  const ClientConfig config =
      ClientConfig{}.WithOptions("UCUDNN_FRAMEWORK= torch-2.11.0+cu130/benchmark ", &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(config.framework, "torch-2.11.0+cu130/benchmark");
  // Validated where it is used (the session; ucudnnShapeCreate refuses it), not dropped here.
  const ClientConfig bad = ClientConfig{}.WithOptions("UCUDNN_FRAMEWORK=t\x7f", &warnings);
  EXPECT_EQ(bad.framework, "t\x7f");
  EXPECT_EQ(ClientConfig{}.framework, "");
}

TEST(ClientConfigTest, ReadsEverySetting) {
  ClientConfig config;
  std::vector<std::string> warnings;
  ApplySettings(Lookup({{"UCUDNN_SERVER", " planner:7000 "},
                        {"UCUDNN_TOKEN", "secret"},
                        {"UCUDNN_POLICY", "all"},
                        {"UCUDNN_WORKSPACE_MODE", "total"},
                        {"UCUDNN_WORKSPACE_BYTES", "1.5GiB"},
                        {"UCUDNN_CACHE_PATH", "/tmp/plans.bin"},
                        {"UCUDNN_COMPILED_PLAN_CACHE", " /tmp/compiled "},
                        {"UCUDNN_DEADLINE_MS", "750"},
                        {"UCUDNN_SERVER_WAIT_MS", "5000"},
                        {"UCUDNN_DISABLE", "0"}}),
                &config, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_TRUE(config.enabled);
  EXPECT_EQ(config.server, "planner:7000");
  EXPECT_EQ(config.token, "secret");
  EXPECT_EQ(config.policy, ClientConfig::BatchPolicy::kAll);
  // "total" is the model of sequential execution (issue 11 item 6), not the sum.
  EXPECT_EQ(config.workspace_mode, ClientConfig::WorkspaceMode::kTotalShared);
  EXPECT_EQ(config.workspace_bytes, 1536ull << 20);
  EXPECT_EQ(config.cache_path, "/tmp/plans.bin");
  EXPECT_EQ(config.compiled_plan_cache, "/tmp/compiled");
  EXPECT_EQ(config.deadline_ms, 750);
  EXPECT_EQ(config.server_wait_ms, 5000u);
}

TEST(ClientConfigTest, WorkspaceModeNames) {
  const std::pair<const char*, ClientConfig::WorkspaceMode> cases[] = {
      {"per_kernel", ClientConfig::WorkspaceMode::kPerKernel},
      {"per-kernel", ClientConfig::WorkspaceMode::kPerKernel},
      {"total", ClientConfig::WorkspaceMode::kTotalShared},
      {"total_shared", ClientConfig::WorkspaceMode::kTotalShared},
      {" Total-Shared ", ClientConfig::WorkspaceMode::kTotalShared},
      {"total_sum", ClientConfig::WorkspaceMode::kTotalSum},
      {"TOTAL-SUM", ClientConfig::WorkspaceMode::kTotalSum},
  };
  for (const auto& [text, mode] : cases) {
    ClientConfig config;
    std::vector<std::string> warnings;
    ApplySettings(Lookup({{"UCUDNN_WORKSPACE_MODE", text}}), &config, &warnings);
    EXPECT_TRUE(warnings.empty()) << text;
    EXPECT_EQ(config.workspace_mode, mode) << text;
  }
}

TEST(ClientConfigTest, InvalidValuesAreIgnoredWithAWarning) {
  ClientConfig config;
  config.deadline_ms = 1234;
  std::vector<std::string> warnings;
  ApplySettings(Lookup({{"UCUDNN_POLICY", "sometimes"},
                        {"UCUDNN_WORKSPACE_MODE", "huge"},
                        {"UCUDNN_WORKSPACE_BYTES", "lots"},
                        {"UCUDNN_DEADLINE_MS", "-5"},
                        {"UCUDNN_DISABLE", "maybe"}}),
                &config, &warnings);
  EXPECT_EQ(warnings.size(), 5u);
  EXPECT_EQ(config.policy, ClientConfig::BatchPolicy::kPowerOfTwo);
  EXPECT_EQ(config.workspace_mode, ClientConfig::WorkspaceMode::kPerKernel);
  EXPECT_EQ(config.workspace_bytes, 0u);
  EXPECT_EQ(config.deadline_ms, 1234);
  EXPECT_TRUE(config.enabled);
  bool named = false;
  for (const std::string& w : warnings)
    named = named || w.find("UCUDNN_POLICY") != std::string::npos;
  EXPECT_TRUE(named) << "each warning names its variable";
}

TEST(ClientConfigTest, OffSwitchAndCacheOff) {
  ClientConfig config;
  config.cache_path = "/somewhere";
  config.compiled_plan_cache = "/elsewhere";
  ApplySettings(Lookup({{"UCUDNN_DISABLE", "1"},
                        {"UCUDNN_CACHE_PATH", "off"},
                        {"UCUDNN_COMPILED_PLAN_CACHE", "None"}}),
                &config, nullptr);
  EXPECT_FALSE(config.enabled);
  EXPECT_TRUE(config.cache_path.empty());
  EXPECT_TRUE(config.compiled_plan_cache.empty());
}

TEST(ClientConfigTest, EnvironmentOverridesCode) {
  ClientConfig code;
  code.server = "from-code:1";
  code.workspace_bytes = 1;
  setenv("UCUDNN_WORKSPACE_BYTES", "64MiB", 1);
  unsetenv("UCUDNN_SERVER");
  const ClientConfig config = code.WithEnvironment();
  unsetenv("UCUDNN_WORKSPACE_BYTES");
  EXPECT_EQ(config.server, "from-code:1");
  EXPECT_EQ(config.workspace_bytes, 64ull << 20);
}

TEST(ClientConfigTest, FromEnvironmentDefaultsTheCachePath) {
  unsetenv("UCUDNN_CACHE_PATH");
  unsetenv("UCUDNN_COMPILED_PLAN_CACHE");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(ClientConfig::FromEnvironment().cache_path, "/tmp/xdg/ucudnn/plans.bin");
  EXPECT_EQ(ClientConfig::FromEnvironment().compiled_plan_cache, "/tmp/xdg/ucudnn/compiled_plans");
  // A relative XDG_CACHE_HOME is not one (the XDG rule): HOME's .cache then.
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  setenv("XDG_CACHE_HOME", "relative", 1);
  setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(ClientConfig::FromEnvironment().compiled_plan_cache,
            "/tmp/home/.cache/ucudnn/compiled_plans");
  if (home != nullptr) {
    setenv("HOME", saved_home.c_str(), 1);
  } else {
    unsetenv("HOME");
  }
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("UCUDNN_CACHE_PATH", "", 1);
  EXPECT_EQ(ClientConfig::FromEnvironment().cache_path, "");
  unsetenv("UCUDNN_CACHE_PATH");
  unsetenv("XDG_CACHE_HOME");
}

TEST(ClientConfigTest, OptionStrings) {
  std::vector<std::string> warnings;
  const ClientConfig config = ClientConfig().WithOptions(
      "UCUDNN_SERVER=a:1; UCUDNN_WORKSPACE_MODE=total_shared\nUCUDNN_SERVER=b:2;;"
      "UCUDNN_TYPO=3; garbage",
      &warnings);
  EXPECT_EQ(config.server, "b:2");  // the last one wins
  EXPECT_EQ(config.workspace_mode, ClientConfig::WorkspaceMode::kTotalShared);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("garbage"), std::string::npos);
  EXPECT_NE(warnings[1].find("UCUDNN_TYPO"), std::string::npos);
}

TEST(ClientConfigTest, Names) {
  EXPECT_EQ(ToString(ClientConfig::BatchPolicy::kUndivided), "undivided");
  EXPECT_EQ(ToString(ClientConfig::WorkspaceMode::kTotalSum), "total_sum");
  EXPECT_EQ(ToString(KernelReport::State::kNoServer), "no_server");
  EXPECT_EQ(ToString(KernelReport::State::kPlanFailed), "plan_failed");
}

}  // namespace
}  // namespace ucudnn::testing
