#include "ucudnn/core/files.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ucudnn/core/text.h"

namespace ucudnn {

Result<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return Unavailable(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Unavailable(path + ": cannot read");
  return buffer.str();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  if (path.empty()) return InvalidArgument("file path: empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      return Unavailable("cannot create " + target.parent_path().string() + ": " + ec.message());
    }
  }
  // Unique per process and call: writers of one file never share a temporary.
  static std::atomic<uint64_t> counter{0};
  const std::string temp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      fs::remove(temp, ec);
      return Unavailable("cannot write " + temp);
    }
  }
  fs::rename(temp, target, ec);
  if (ec) {
    const std::string reason = ec.message();
    fs::remove(temp, ec);
    return Unavailable("cannot replace " + path + ": " + reason);
  }
  return Status::Ok();
}

std::string UserCachePath(std::string_view name) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/ucudnn/" + std::string(name);
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') {
    return std::string(home) + "/.cache/ucudnn/" + std::string(name);
  }
  return "";
}

std::string PathSetting(std::string_view text) {
  const std::string path(Trim(text));
  const std::string lower = Lowercase(path);
  return (lower == "off" || lower == "none" || lower == "0") ? "" : path;
}

}  // namespace ucudnn
