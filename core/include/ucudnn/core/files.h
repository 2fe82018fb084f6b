// Whole-file reads and atomic replacement: how the local caches (the plan cache, the compiled
// execution plans) touch their files, so that a reader never sees a half-written one and
// processes sharing a cache never corrupt it; and where those caches live by default.
#pragma once

#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

// The file's bytes: kNotFound when it does not exist, kUnavailable when it cannot be read.
Result<std::string> ReadWholeFile(const std::string& path);

// Replaces `path` with `bytes` atomically (a temporary file beside it, then rename), creating its
// directory first. kUnavailable naming what failed; the temporary file never stays behind.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// `name` in the user's cache directory: $XDG_CACHE_HOME/ucudnn/<name>, else
// ~/.cache/ucudnn/<name>; empty when neither is an absolute path. The client's caches and the
// worker's compiled plans default to it, so a worker and the jobs of one user on a machine share
// them.
std::string UserCachePath(std::string_view name);

// A path setting's value (a flag or an environment variable): "off", "none" or "0", in any case,
// turn it off (empty); anything else is the path, trimmed.
std::string PathSetting(std::string_view text);

}  // namespace ucudnn
