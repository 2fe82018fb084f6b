// Whole-file reads and atomic replacement: how the local caches (the plan cache, the compiled
// execution plans) touch their files, so that a reader never sees a half-written one and
// processes sharing a cache never corrupt it.
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

}  // namespace ucudnn
