// The compiled-plan store: cuDNN execution plans of runtime-compiled engines, serialized, in a
// directory on the machine, so that a job builds each such plan once per machine rather than
// once per process. Building one compiles its kernel (0.1-1 s, one at a time: ConvNeXt-T's 27
// plans took 3.6-4.0 s of a job's first step); loading its serialized form skips the compile.
// cuDNN guarantees no compatibility of a serialized plan across versions or devices, so the key
// holds the device fingerprint (GPU model, SM count, cuDNN and CUDA runtime versions) and the
// plan's identity.
//
// One file per plan, named by the key's hash (<16 hex digits>.plan), format version 1:
//   "ucudnn-compiled-plan 1\n"
//   <the key>"\n"
//   <payload bytes, decimal> " " <FNV-1a 64 of the payload, 16 hex digits>"\n"
//   <payload: cuDNN's serialized plan>
// A file that fails a check (another key under a colliding name, a truncated write, another
// format) is not used; the plan is built and the file replaced. Files are replaced atomically,
// so processes sharing the directory never read half a file. The directory keeps at most
// max_files plans: a save beyond it removes the least recently used (by modification time, which
// a load refreshes). Removing the directory is always safe (the plans are built again).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

inline constexpr std::string_view kCompiledPlanMagic = "ucudnn-compiled-plan";
inline constexpr int kCompiledPlanVersion = 1;

// A serialized plan's file bytes and back (pure). Decode returns the payload only when the file
// is of this format and version, holds exactly `key`, and its payload is whole; else
// kInvalidArgument naming what is wrong.
std::string EncodeCompiledPlan(std::string_view key, std::string_view payload);
Result<std::string> DecodeCompiledPlan(std::string_view key, std::string_view bytes);

class CompiledPlanStore {
 public:
  // Some thousand plans: a few hundred megabytes at most (cuDNN's are 70-140 KB), the plans of
  // dozens of networks.
  static constexpr size_t kDefaultMaxFiles = 4096;
  // Empty: no store (Load finds nothing, Save does nothing).
  explicit CompiledPlanStore(std::string directory, size_t max_files = kDefaultMaxFiles)
      : directory_(std::move(directory)), max_files_(max_files) {}
  const std::string& directory() const { return directory_; }
  bool enabled() const { return !directory_.empty(); }
  // Where `key`'s plan lives.
  std::string PathOf(std::string_view key) const;
  // The payload stored for `key`: kNotFound when there is none, kInvalidArgument when the file is
  // damaged or holds another key, kUnavailable when it cannot be read.
  Result<std::string> Load(std::string_view key) const;
  // Writes `key`'s plan, then removes the least recently used plans beyond max_files.
  Status Save(std::string_view key, std::string_view payload) const;
  // Whether plans can be saved here (the directory made, a file written and removed);
  // kUnavailable saying why not (a read-only file system, a missing home). Ok for no store.
  Status CheckWritable() const;

 private:
  void RemoveLeastRecentlyUsed() const;
  std::string directory_;
  size_t max_files_;
};

}  // namespace ucudnn
