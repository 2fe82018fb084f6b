#include "ucudnn/core/compiled_plans.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "ucudnn/core/files.h"
#include "ucudnn/core/problem.h"

namespace ucudnn {
namespace {

// A payload beyond this is a damaged size field, not a plan (cuDNN's are some kilobytes).
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 28;

std::string Hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The next '\n'-terminated line of `bytes` from `*offset`, advancing past it; false at the end.
bool NextLine(std::string_view bytes, size_t* offset, std::string_view* line) {
  const size_t end = bytes.find('\n', *offset);
  if (end == std::string_view::npos) return false;
  *line = bytes.substr(*offset, end - *offset);
  *offset = end + 1;
  return true;
}

}  // namespace

std::string EncodeCompiledPlan(std::string_view key, std::string_view payload) {
  std::string out;
  out.reserve(key.size() + payload.size() + 64);
  out.append(kCompiledPlanMagic).append(" ").append(std::to_string(kCompiledPlanVersion));
  out.append("\n").append(key).append("\n");
  out.append(std::to_string(payload.size())).append(" ").append(Hex16(Fnv1a64(payload)));
  out.append("\n").append(payload);
  return out;
}

Result<std::string> DecodeCompiledPlan(std::string_view key, std::string_view bytes) {
  size_t offset = 0;
  std::string_view header, stored_key, sizes;
  if (!NextLine(bytes, &offset, &header) ||
      header != std::string(kCompiledPlanMagic) + " " + std::to_string(kCompiledPlanVersion)) {
    return InvalidArgument("not a compiled plan of format version " +
                           std::to_string(kCompiledPlanVersion));
  }
  if (!NextLine(bytes, &offset, &stored_key) || stored_key != key) {
    return InvalidArgument("holds another plan's key");
  }
  if (!NextLine(bytes, &offset, &sizes)) return InvalidArgument("truncated header");
  const size_t space = sizes.find(' ');
  if (space == std::string_view::npos) return InvalidArgument("bad payload size");
  uint64_t size = 0;
  const auto [end, error] = std::from_chars(sizes.data(), sizes.data() + space, size);
  if (error != std::errc() || end != sizes.data() + space || size > kMaxPayloadBytes) {
    return InvalidArgument("bad payload size");
  }
  const std::string_view payload = bytes.substr(offset);
  if (payload.size() != size) {
    return InvalidArgument("payload of " + std::to_string(payload.size()) + " bytes, header says " +
                           std::to_string(size));
  }
  if (sizes.substr(space + 1) != Hex16(Fnv1a64(payload))) {
    return InvalidArgument("payload checksum mismatch");
  }
  return std::string(payload);
}

std::string CompiledPlanStore::PathOf(std::string_view key) const {
  return directory_ + "/" + Hex16(Fnv1a64(key)) + ".plan";
}

Result<std::string> CompiledPlanStore::Load(std::string_view key) const {
  if (!enabled()) return NotFound("no compiled-plan store");
  const std::string path = PathOf(key);
  UCUDNN_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  Result<std::string> payload = DecodeCompiledPlan(key, bytes);
  if (!payload.ok()) return payload.status().WithContext(path);
  // Used now: the last to be removed (a read-only directory keeps its order).
  std::error_code ignored;
  std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), ignored);
  return payload;
}

void CompiledPlanStore::RemoveLeastRecentlyUsed() const {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> plans;
  for (fs::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".plan") continue;
    std::error_code time_error;
    const fs::file_time_type used = it->last_write_time(time_error);
    if (!time_error) plans.emplace_back(used, it->path());
  }
  if (ec || plans.size() <= max_files_) return;
  const auto excess = static_cast<std::ptrdiff_t>(plans.size() - max_files_);
  std::nth_element(plans.begin(), plans.begin() + excess, plans.end());
  for (auto it = plans.begin(); it != plans.begin() + excess; ++it) fs::remove(it->second, ec);
}

Status CompiledPlanStore::Save(std::string_view key, std::string_view payload) const {
  if (!enabled()) return Status::Ok();
  if (key.find('\n') != std::string_view::npos) {
    return InvalidArgument("compiled plan key: holds a line break");
  }
  UCUDNN_RETURN_IF_ERROR(WriteFileAtomically(PathOf(key), EncodeCompiledPlan(key, payload)));
  RemoveLeastRecentlyUsed();
  return Status::Ok();
}

Status CompiledPlanStore::CheckWritable() const {
  if (!enabled()) return Status::Ok();
  const std::string probe = (std::filesystem::path(directory_) / ".writable").string();
  if (const Status written = WriteFileAtomically(probe, "ok"); !written.ok()) {
    return Unavailable("compiled-plan store " + directory_ +
                       " is not writable: " + written.message());
  }
  std::error_code ignored;
  std::filesystem::remove(probe, ignored);
  return Status::Ok();
}

}  // namespace ucudnn
