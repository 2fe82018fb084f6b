#include "ucudnn/core/fingerprint.h"

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "ucudnn/core/problem.h"
#include "ucudnn/core/text.h"

// OpenBLAS's own description of the build ("OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64");
// declared here so that this file does not depend on which cblas.h variant is installed.
extern "C" char* openblas_get_config();

namespace ucudnn {
namespace {

constexpr size_t kMaxNameBytes = 256;

// ';' and '=' separate the key's fields, so they are escaped as %3B and %3D, and '%' as %25 so
// that the escape itself is unambiguous: the key is injective ("a;b" and "a_b" differ). Text
// without those three characters is kept verbatim, so such keys are those of schema 3.
std::string KeySafe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    switch (ch) {
      case '%':
        out += "%25";
        break;
      case ';':
        out += "%3B";
        break;
      case '=':
        out += "%3D";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Text fields end up in PostgreSQL TEXT columns and protobuf strings: valid UTF-8, no NUL.
Status CheckText(std::string_view field, std::string_view value, bool required) {
  if (required && value.empty()) return InvalidArgument(std::string(field) + ": required");
  if (value.size() > kMaxNameBytes) {
    return InvalidArgument(std::string(field) + ": at most " + std::to_string(kMaxNameBytes) +
                           " bytes, got " + std::to_string(value.size()));
  }
  if (value.find('\0') != std::string_view::npos) {
    return InvalidArgument(std::string(field) + ": must not contain NUL bytes");
  }
  // Names are printed in tables and logs: no escape sequences, no forged lines.
  if (HasControlCharacter(value)) {
    return InvalidArgument(std::string(field) +
                           ": must not contain control characters (ESC, line breaks, tabs)");
  }
  if (!IsValidUtf8(value)) return InvalidArgument(std::string(field) + ": must be valid UTF-8");
  return Status::Ok();
}

Status CheckNonNegative(std::string_view field, int64_t value) {
  if (value < 0) {
    return InvalidArgument(std::string(field) + ": must be >= 0, got " + std::to_string(value));
  }
  return Status::Ok();
}

Status CheckPositive(std::string_view field, int64_t value, std::string_view backend) {
  if (value <= 0) {
    return InvalidArgument(std::string(field) + ": must be positive for backend " +
                           Quoted(backend) + ", got " + std::to_string(value));
  }
  return Status::Ok();
}

Status CheckZero(std::string_view field, int64_t value, std::string_view backend) {
  if (value != 0) {
    return InvalidArgument(std::string(field) + ": must be 0 for backend " + Quoted(backend) +
                           " (a GPU field), got " + std::to_string(value));
  }
  return Status::Ok();
}

// "key<TAB>: value" lines as in /proc/cpuinfo and /proc/meminfo.
bool SplitProcLine(std::string_view line, std::string_view& key, std::string_view& value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  key = Trim(line.substr(0, colon));
  value = Trim(line.substr(colon + 1));
  return true;
}

// "openblas 0.3.21 threads:1" from OpenBLAS's configuration string ("OpenBLAS 0.3.21 NO_AFFINITY
// Haswell MAX_THREADS=64"). The version is its second word; the rest (core name, build options)
// varies between machines with the same library and must not split their timings. The thread
// count must: timings at 16 threads are not timings at 1.
std::string OpenBlasDescription(std::string_view config, int threads) {
  std::string out = "openblas";
  std::istringstream words{std::string(config)};
  std::string library, version;
  words >> library >> version;
  if (!version.empty()) out += " " + version;
  return out + " threads:" + std::to_string(threads);
}

constexpr uint64_t kGiB = uint64_t{1} << 30;

// MemTotal ("16318480 kB") rounded up to whole GiB: it is the installed memory less what the
// firmware and kernel reserve, which differs by some MiB between otherwise identical hosts.
uint64_t MemTotalBytes(std::string_view meminfo) {
  std::istringstream lines{std::string(meminfo)};
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view key, value;
    if (!SplitProcLine(line, key, value) || key != "MemTotal") continue;
    const std::string_view number = value.substr(0, value.find(' '));
    Result<uint64_t> kib = ParseInteger<uint64_t>("MemTotal", number);
    if (!kib.ok() || *kib > (UINT64_MAX - kGiB) / 1024) return 0;
    return (*kib * 1024 + kGiB - 1) / kGiB * kGiB;
  }
  return 0;
}

}  // namespace

std::string DeviceFingerprint::Key() const {
  std::string key = std::string(kFingerprintKeyVersion) + ";backend=" + KeySafe(backend) +
                    ";name=" + KeySafe(name);
  key += ";cc=" + std::to_string(cc_major) + "." + std::to_string(cc_minor);
  key += ";sm=" + std::to_string(sm_count);
  key += ";mem=" + std::to_string(memory_bytes);
  key += ";cudnn=" + std::to_string(cudnn_version);
  key += ";cuda=" + std::to_string(cuda_runtime_version);
  key += ";blas=" + KeySafe(blas);
  return key;
}

uint64_t DeviceFingerprint::Hash() const { return Fnv1a64(Key()); }

Status Validate(const DeviceFingerprint& f) {
  if (f.backend != "cudnn" && f.backend != "cpu") {
    return InvalidArgument("backend: must be \"cudnn\" or \"cpu\", got " +
                           QuoteForError(f.backend));
  }
  UCUDNN_RETURN_IF_ERROR(CheckText("name", f.name, /*required=*/true));
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("cc_major", f.cc_major));
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("cc_minor", f.cc_minor));
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("sm_count", f.sm_count));
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("cudnn_version", f.cudnn_version));
  UCUDNN_RETURN_IF_ERROR(CheckNonNegative("cuda_runtime_version", f.cuda_runtime_version));
  UCUDNN_RETURN_IF_ERROR(CheckText("blas", f.blas, /*required=*/false));
  if (f.backend == "cudnn") {
    UCUDNN_RETURN_IF_ERROR(CheckPositive("cc_major", f.cc_major, f.backend));
    UCUDNN_RETURN_IF_ERROR(CheckPositive("sm_count", f.sm_count, f.backend));
    if (f.memory_bytes == 0) {
      return InvalidArgument("memory_bytes: must be positive for backend \"cudnn\", got 0");
    }
    UCUDNN_RETURN_IF_ERROR(CheckPositive("cudnn_version", f.cudnn_version, f.backend));
  } else {
    UCUDNN_RETURN_IF_ERROR(CheckPositive("sm_count", f.sm_count, f.backend));
    // A CPU fingerprint with GPU fields set would be a device of its own that no CPU worker
    // ever matches.
    UCUDNN_RETURN_IF_ERROR(CheckZero("cc_major", f.cc_major, f.backend));
    UCUDNN_RETURN_IF_ERROR(CheckZero("cc_minor", f.cc_minor, f.backend));
    UCUDNN_RETURN_IF_ERROR(CheckZero("cudnn_version", f.cudnn_version, f.backend));
    UCUDNN_RETURN_IF_ERROR(CheckZero("cuda_runtime_version", f.cuda_runtime_version, f.backend));
  }
  return Status::Ok();
}

DeviceFingerprint CpuFingerprintFrom(std::string_view cpuinfo, std::string_view meminfo,
                                     std::string_view openblas_config, int blas_threads,
                                     int hardware_concurrency) {
  DeviceFingerprint f;
  f.backend = "cpu";

  std::istringstream lines{std::string(cpuinfo)};
  std::string line;
  int processors = 0;
  while (std::getline(lines, line)) {
    std::string_view key, value;
    if (!SplitProcLine(line, key, value)) continue;
    if (key == "processor") ++processors;
    if (key == "model name" && f.name.empty()) f.name = std::string(value);
  }
  if (f.name.empty()) f.name = "unknown cpu";  // e.g. some ARM kernels report no model name
  if (f.name.size() > kMaxNameBytes) {
    f.name.resize(kMaxNameBytes);
    // Never cut a UTF-8 sequence in two (at most 3 bytes of one are left over).
    for (int i = 0; i < 3 && !IsValidUtf8(f.name); ++i) f.name.pop_back();
  }
  f.sm_count = processors > 0 ? processors : hardware_concurrency;
  if (f.sm_count <= 0) f.sm_count = 1;
  f.memory_bytes = MemTotalBytes(meminfo);
  f.blas = OpenBlasDescription(openblas_config, blas_threads > 0 ? blas_threads : 1);
  return f;
}

DeviceFingerprint CpuFingerprint(int blas_threads) {
  auto read = [](const char* path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const char* config = openblas_get_config();
  return CpuFingerprintFrom(read("/proc/cpuinfo"), read("/proc/meminfo"),
                            config != nullptr ? config : "", blas_threads,
                            static_cast<int>(std::thread::hardware_concurrency()));
}

DeviceFingerprint CpuFingerprint() { return CpuFingerprint(1); }

}  // namespace ucudnn
