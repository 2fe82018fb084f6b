#include "ucudnn/core/fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "support/devices.h"
#include "ucudnn/core/problem.h"

namespace ucudnn {
namespace {

using test_support::H100;
using test_support::Xeon;
using ::testing::StartsWith;

void ExpectInvalid(const DeviceFingerprint& f, const std::string& message) {
  Status s = Validate(f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << f.Key();
  EXPECT_EQ(s.message(), message) << f.Key();
}

TEST(FingerprintKey, Format) {
  EXPECT_EQ(H100().Key(),
            "v2;backend=cudnn;name=NVIDIA H100 80GB HBM3;cc=9.0;sm=132;mem=85045854208;"
            "cudnn=91400;cuda=13000;blas=");
  EXPECT_EQ(Xeon().Key(),
            "v2;backend=cpu;name=Intel(R) Xeon(R) CPU @ 2.20GHz;cc=0.0;sm=2;mem=8589934592;"
            "cudnn=0;cuda=0;blas=openblas 0.3.21 threads:1");
}

TEST(FingerprintKey, SeparatorsInNamesAreEscaped) {
  DeviceFingerprint f = Xeon();
  f.name = "a;b=c%";
  f.blas = "x=y;z";
  EXPECT_EQ(f.Key(),
            "v2;backend=cpu;name=a%3Bb%3Dc%25;cc=0.0;sm=2;mem=8589934592;cudnn=0;cuda=0;"
            "blas=x%3Dy%3Bz");
  // Other characters, including spaces and non-ASCII, are kept verbatim.
  f.name = "  Ärger (R)  ";
  EXPECT_THAT(f.Key(), ::testing::HasSubstr(";name=  Ärger (R)  ;"));
}

TEST(FingerprintKey, IsInjectiveOverTheSeparatorsAndTheEscape) {
  // Each of these once shared a key with another (';' and '=' were replaced by '_'), or would
  // with a careless escape ("%3B" written literally must not read as an escaped ';').
  const std::vector<std::string> names = {"Evil;GPU=1", "Evil_GPU_1", "Evil%3BGPU%3D1",
                                          "Evil;GPU_1", "Evil%GPU=1", "Evil%25GPU=1"};
  std::set<std::string> keys;
  std::set<uint64_t> hashes;
  for (const auto& name : names) {
    DeviceFingerprint f = H100();
    f.name = name;
    EXPECT_TRUE(keys.insert(f.Key()).second) << f.Key();
    EXPECT_TRUE(hashes.insert(f.Hash()).second) << f.Key();
  }
  DeviceFingerprint plain = H100();
  plain.blas = "openblas 0.3.21 threads:1";
  // Names and BLAS texts without '%', ';' and '=' keep the keys (and hashes) of schema 3.
  EXPECT_EQ(plain.Key(),
            "v2;backend=cudnn;name=NVIDIA H100 80GB HBM3;cc=9.0;sm=132;mem=85045854208;"
            "cudnn=91400;cuda=13000;blas=openblas 0.3.21 threads:1");
}

// Pinned: fingerprint hashes identify devices in the database of every installation.
TEST(FingerprintHash, PinnedValues) {
  // Changed deliberately with the key version (v2: timings on walked slices).
  EXPECT_EQ(H100().Hash(), 0xa61b8ebe5568d52full);
  EXPECT_EQ(Xeon().Hash(), 0x0afc1a357e0fbe1dull);
  EXPECT_EQ(H100().Hash(), Fnv1a64(H100().Key()));
}

TEST(FingerprintHash, EveryFieldMatters) {
  const DeviceFingerprint base = H100();
  std::vector<std::function<void(DeviceFingerprint&)>> changes = {
      [](DeviceFingerprint& f) { f.backend = "cpu"; },
      [](DeviceFingerprint& f) { f.name = "NVIDIA H100 PCIe"; },
      [](DeviceFingerprint& f) { f.cc_major = 8; },
      [](DeviceFingerprint& f) { f.cc_minor = 1; },
      [](DeviceFingerprint& f) { f.sm_count = 114; },
      [](DeviceFingerprint& f) { f.memory_bytes += 1; },
      [](DeviceFingerprint& f) { f.cudnn_version = 91900; },
      [](DeviceFingerprint& f) { f.cuda_runtime_version = 12080; },
      [](DeviceFingerprint& f) { f.blas = "x"; },
  };
  std::set<uint64_t> hashes = {base.Hash()};
  for (size_t i = 0; i < changes.size(); ++i) {
    DeviceFingerprint f = base;
    changes[i](f);
    EXPECT_NE(f, base) << i;
    EXPECT_TRUE(hashes.insert(f.Hash()).second) << i << ": " << f.Key();
  }
  // cc 1.10 and 11.0 must not collide ("cc=1.10" vs "cc=11.0").
  DeviceFingerprint a = base, b = base;
  a.cc_major = 1;
  a.cc_minor = 10;
  b.cc_major = 11;
  b.cc_minor = 0;
  EXPECT_NE(a.Key(), b.Key());
}

TEST(FingerprintValidate, ValidExamples) {
  EXPECT_TRUE(Validate(H100()).ok()) << Validate(H100()).ToString();
  EXPECT_TRUE(Validate(Xeon()).ok()) << Validate(Xeon()).ToString();
  // The CPU backend needs no GPU fields and no memory size.
  DeviceFingerprint cpu = Xeon();
  cpu.memory_bytes = 0;
  cpu.blas.clear();
  EXPECT_TRUE(Validate(cpu).ok());
}

TEST(FingerprintValidate, Backend) {
  for (const char* bad : {"gpu", "", "CUDNN", "cudnn ", "cuda"}) {
    DeviceFingerprint f = H100();
    f.backend = bad;
    ExpectInvalid(f, std::string("backend: must be \"cudnn\" or \"cpu\", got '") + bad + "'");
  }
}

TEST(FingerprintValidate, Name) {
  DeviceFingerprint f = H100();
  f.name = "";
  ExpectInvalid(f, "name: required");
  f.name = std::string(256, 'x');
  EXPECT_TRUE(Validate(f).ok());
  f.name = std::string(257, 'x');
  ExpectInvalid(f, "name: at most 256 bytes, got 257");
  f.name = std::string("H100\0x", 6);
  ExpectInvalid(f, "name: must not contain NUL bytes");
  // Names are printed by `ucudnn devices` and logged (issue 22).
  for (const char* control : {"H100\x1b]0;owned\x07", "H100\nforged line", "H100\x7f"}) {
    f.name = control;
    ExpectInvalid(f, "name: must not contain control characters (ESC, line breaks, tabs)");
  }
  f = Xeon();
  f.blas = "OpenBLAS\x1b[31m";
  ExpectInvalid(f, "blas: must not contain control characters (ESC, line breaks, tabs)");
  f = H100();
  for (const char* bad_utf8 :
       {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xe2\x82"}) {
    f.name = bad_utf8;
    ExpectInvalid(f, "name: must be valid UTF-8");
  }
  for (const char* good_utf8 : {"\xc3\xa4", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}) {
    f.name = good_utf8;
    EXPECT_TRUE(Validate(f).ok()) << good_utf8;
  }
}

TEST(FingerprintValidate, Blas) {
  DeviceFingerprint f = Xeon();
  f.blas = std::string(256, 'b');
  EXPECT_TRUE(Validate(f).ok());
  f.blas = std::string(257, 'b');
  ExpectInvalid(f, "blas: at most 256 bytes, got 257");
  f.blas = "\xfe";
  ExpectInvalid(f, "blas: must be valid UTF-8");
}

TEST(FingerprintValidate, CudnnNeedsItsGpuFields) {
  DeviceFingerprint f = H100();
  f.cc_major = 0;
  ExpectInvalid(f, "cc_major: must be positive for backend \"cudnn\", got 0");
  f = H100();
  f.sm_count = 0;
  ExpectInvalid(f, "sm_count: must be positive for backend \"cudnn\", got 0");
  f = H100();
  f.cudnn_version = 0;
  ExpectInvalid(f, "cudnn_version: must be positive for backend \"cudnn\", got 0");
  f = H100();
  f.memory_bytes = 0;
  ExpectInvalid(f, "memory_bytes: must be positive for backend \"cudnn\", got 0");
  // Minimal positive values pass; cc_minor 0 and an unknown runtime version are allowed.
  f = H100();
  f.cc_major = 1;
  f.sm_count = 1;
  f.cudnn_version = 1;
  f.memory_bytes = 1;
  f.cuda_runtime_version = 0;
  EXPECT_TRUE(Validate(f).ok());
}

TEST(FingerprintValidate, CpuNeedsCores) {
  DeviceFingerprint f = Xeon();
  f.sm_count = 0;
  ExpectInvalid(f, "sm_count: must be positive for backend \"cpu\", got 0");
  f.sm_count = 1;
  EXPECT_TRUE(Validate(f).ok());
}

TEST(FingerprintValidate, NegativeNumbers) {
  const std::vector<std::pair<std::string, std::function<void(DeviceFingerprint&)>>> cases = {
      {"cc_major", [](DeviceFingerprint& f) { f.cc_major = -1; }},
      {"cc_minor", [](DeviceFingerprint& f) { f.cc_minor = -1; }},
      {"sm_count", [](DeviceFingerprint& f) { f.sm_count = -1; }},
      {"cudnn_version", [](DeviceFingerprint& f) { f.cudnn_version = -1; }},
      {"cuda_runtime_version", [](DeviceFingerprint& f) { f.cuda_runtime_version = -1; }},
  };
  for (const DeviceFingerprint& base : {H100(), Xeon()}) {
    for (const auto& [field, change] : cases) {
      DeviceFingerprint f = base;
      change(f);
      ExpectInvalid(f, field + ": must be >= 0, got -1");
    }
  }
}

TEST(FingerprintValidate, CpuRejectsGpuFields) {
  const std::vector<std::pair<std::string, std::function<void(DeviceFingerprint&)>>> cases = {
      {"cc_major", [](DeviceFingerprint& f) { f.cc_major = 9; }},
      {"cc_minor", [](DeviceFingerprint& f) { f.cc_minor = 1; }},
      {"cudnn_version", [](DeviceFingerprint& f) { f.cudnn_version = 91400; }},
      {"cuda_runtime_version", [](DeviceFingerprint& f) { f.cuda_runtime_version = 13000; }},
  };
  for (const auto& [field, change] : cases) {
    DeviceFingerprint f = Xeon();
    change(f);
    Status s = Validate(f);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(s.message(), StartsWith(field + ": must be 0 for backend \"cpu\" (a GPU field)"));
    // The same values are what a GPU fingerprint needs.
    DeviceFingerprint gpu = H100();
    change(gpu);
    EXPECT_TRUE(Validate(gpu).ok()) << field;
  }
}

constexpr std::string_view kCpuinfo =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
constexpr std::string_view kOpenBlasConfig = "OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64";

std::string Meminfo(uint64_t kib) {
  return "MemTotal:       " + std::to_string(kib) + " kB\nMemFree:         1234 kB\n";
}

TEST(CpuFingerprintFrom, ReadsTheProcFiles) {
  const DeviceFingerprint f =
      CpuFingerprintFrom(kCpuinfo, Meminfo(8144496), kOpenBlasConfig, 1, /*hardware=*/7);
  EXPECT_EQ(f, Xeon()) << f.Key();
  EXPECT_TRUE(Validate(f).ok());
}

TEST(CpuFingerprintFrom, TheBlasThreadCountIsPartOfTheDevice) {
  const DeviceFingerprint one =
      CpuFingerprintFrom(kCpuinfo, Meminfo(8144496), kOpenBlasConfig, 1, 2);
  const DeviceFingerprint four =
      CpuFingerprintFrom(kCpuinfo, Meminfo(8144496), kOpenBlasConfig, 4, 2);
  EXPECT_EQ(one.blas, "openblas 0.3.21 threads:1");
  EXPECT_EQ(four.blas, "openblas 0.3.21 threads:4");
  EXPECT_NE(one.Hash(), four.Hash());
  // Fewer than one thread means one; a configuration string without a version still counts them.
  EXPECT_EQ(CpuFingerprintFrom(kCpuinfo, "", kOpenBlasConfig, 0, 2).blas,
            "openblas 0.3.21 threads:1");
  EXPECT_EQ(CpuFingerprintFrom(kCpuinfo, "", "OpenBLAS", 3, 2).blas, "openblas threads:3");
  EXPECT_EQ(CpuFingerprintFrom(kCpuinfo, "", "", 2, 2).blas, "openblas threads:2");
}

TEST(CpuFingerprintFrom, MemoryIsRoundedUpToWholeGib) {
  auto memory = [](std::string_view meminfo) {
    return CpuFingerprintFrom(kCpuinfo, meminfo, kOpenBlasConfig, 1, 2).memory_bytes;
  };
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // Two 16 GiB hosts whose firmware and kernel reserve different amounts share one device.
  EXPECT_EQ(memory(Meminfo(16318480)), 16 * kGiB);
  EXPECT_EQ(memory(Meminfo(15990784)), 16 * kGiB);
  EXPECT_EQ(memory(Meminfo(16 * 1024 * 1024)), 16 * kGiB);  // exact stays
  EXPECT_EQ(memory(Meminfo(16 * 1024 * 1024 + 1)), 17 * kGiB);
  EXPECT_EQ(memory(Meminfo(1)), kGiB);
  EXPECT_EQ(memory(Meminfo(0)), 0u);
  // Unreadable: no memory size (valid for the CPU backend).
  EXPECT_EQ(memory(""), 0u);
  EXPECT_EQ(memory("MemTotal: lots kB\n"), 0u);
  EXPECT_EQ(memory("MemTotal: 99999999999999999999 kB\n"), 0u);
  EXPECT_EQ(memory("MemFree: 5 kB\nMemTotal:\t2097152 kB\n"), 2 * kGiB);
}

TEST(CpuFingerprintFrom, NameAndCores) {
  // No "model name" (some ARM kernels) and no "processor" lines: fallbacks.
  DeviceFingerprint f = CpuFingerprintFrom("Hardware\t: something\n", "", kOpenBlasConfig, 1, 6);
  EXPECT_EQ(f.name, "unknown cpu");
  EXPECT_EQ(f.sm_count, 6);
  EXPECT_EQ(CpuFingerprintFrom("", "", kOpenBlasConfig, 1, 0).sm_count, 1);
  // An over-long model name is cut at 256 bytes, never inside a UTF-8 sequence.
  const std::string long_name = std::string(255, 'x') + "\xc3\xa4";  // 'ä' at bytes 255-256
  f = CpuFingerprintFrom("model name\t: " + long_name + "\n", "", kOpenBlasConfig, 1, 1);
  EXPECT_EQ(f.name, std::string(255, 'x'));
  EXPECT_TRUE(Validate(f).ok()) << Validate(f).ToString();
}

TEST(CpuFingerprint, DescribesThisMachine) {
  const DeviceFingerprint f = CpuFingerprint();
  EXPECT_TRUE(Validate(f).ok()) << Validate(f).ToString() << " " << f.Key();
  EXPECT_EQ(f.backend, "cpu");
  EXPECT_FALSE(f.name.empty());
  EXPECT_EQ(f.cc_major, 0);
  EXPECT_EQ(f.cudnn_version, 0);
  EXPECT_EQ(f.cuda_runtime_version, 0);
  EXPECT_GT(f.memory_bytes, 0u);
  EXPECT_EQ(f.memory_bytes % (uint64_t{1} << 30), 0u);  // whole GiB
  // "openblas 0.3.21 threads:1": the version and the threads, not the build's core name.
  EXPECT_THAT(f.blas, ::testing::MatchesRegex("openblas [0-9]+\\.[0-9]+\\.[0-9]+ threads:1"));
  EXPECT_EQ(f, CpuFingerprint(1));
  EXPECT_THAT(CpuFingerprint(3).blas, ::testing::EndsWith(" threads:3"));
  EXPECT_NE(CpuFingerprint(3).Hash(), f.Hash());

  // Cross-check with /proc: one "processor" line per logical core.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  int processors = 0;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("processor", 0) == 0) ++processors;
  }
  if (processors > 0) {
    EXPECT_EQ(f.sm_count, processors);
  }
  // Stable from one call to the next (the fingerprint is a database key).
  EXPECT_EQ(CpuFingerprint(), f);
  EXPECT_EQ(CpuFingerprint().Hash(), f.Hash());
}

}  // namespace
}  // namespace ucudnn
