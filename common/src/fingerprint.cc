#include "ucudnn/core/fingerprint.h"

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "ucudnn/core/problem.h"

// OpenBLAS's own description of the build ("OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64");
// declared here so that this file does not depend on which cblas.h variant is installed.
extern "C" char* openblas_get_config();

namespace ucudnn {
namespace {

constexpr size_t kMaxNameBytes = 256;

// ';' and '=' separate the key's fields; anything else is kept as the device reports it.
std::string KeySafe(std::string_view s) {
  std::string out(s);
  for (char& ch : out) {
    if (ch == ';' || ch == '=') ch = '_';
  }
  return out;
}

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t code_point = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    }
    if ((lead & 0xE0) == 0xC0) {
      extra = 1;
      code_point = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      extra = 2;
      code_point = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      extra = 3;
      code_point = lead & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (size_t j = 1; j <= extra; ++j) {
      const auto next = static_cast<unsigned char>(s[i + j]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code_point < kMinForLength[extra] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

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

std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// "key<TAB>: value" lines as in /proc/cpuinfo and /proc/meminfo.
bool SplitProcLine(std::string_view line, std::string_view& key, std::string_view& value) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  key = Trim(line.substr(0, colon));
  value = Trim(line.substr(colon + 1));
  return true;
}

std::string OpenBlasDescription() {
  const char* config = openblas_get_config();
  if (config == nullptr) return "openblas";
  // The version is the second word; the rest (core name, threading) varies between machines
  // with the same library and must not split their timings.
  std::istringstream words(config);
  std::string library, version;
  words >> library >> version;
  if (version.empty()) return "openblas";
  return "openblas " + version;
}

}  // namespace

std::string DeviceFingerprint::Key() const {
  std::string key = "v1;backend=" + KeySafe(backend) + ";name=" + KeySafe(name);
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
    return InvalidArgument("backend: must be \"cudnn\" or \"cpu\", got " + Quoted(f.backend));
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
  }
  return Status::Ok();
}

DeviceFingerprint CpuFingerprint() {
  DeviceFingerprint f;
  f.backend = "cpu";

  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  int processors = 0;
  while (std::getline(cpuinfo, line)) {
    std::string_view key, value;
    if (!SplitProcLine(line, key, value)) continue;
    if (key == "processor") ++processors;
    if (key == "model name" && f.name.empty()) f.name = std::string(value);
  }
  if (f.name.empty()) f.name = "unknown cpu";  // e.g. some ARM kernels report no model name
  if (f.name.size() > kMaxNameBytes) f.name.resize(kMaxNameBytes);
  f.sm_count = processors > 0 ? processors : static_cast<int>(std::thread::hardware_concurrency());
  if (f.sm_count <= 0) f.sm_count = 1;

  std::ifstream meminfo("/proc/meminfo");
  while (std::getline(meminfo, line)) {
    std::string_view key, value;
    if (!SplitProcLine(line, key, value) || key != "MemTotal") continue;
    // "16318480 kB"
    uint64_t kib = 0;
    std::istringstream(std::string(value)) >> kib;
    f.memory_bytes = kib * 1024;
    break;
  }

  f.blas = OpenBlasDescription();
  return f;
}

}  // namespace ucudnn
