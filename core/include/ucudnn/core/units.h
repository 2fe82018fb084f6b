// Byte sizes as people write them ("64MiB", "1.5 GiB", "4096") and durations ("30s", "500ms").
// The general text helpers (ParseInteger, Lowercase, Trim, CSV records and lines) are in text.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

// Accepts a non-negative number with an optional unit: B, KiB, MiB, GiB, TiB (powers of 1024),
// KB, MB, GB, TB (powers of 1000); case-insensitive, spaces allowed. "64MiB" -> 67108864.
Result<uint64_t> ParseByteSize(std::string_view text);
// 67108864 -> "64 MiB"; exact multiples print without decimals, others with one.
std::string FormatBytes(uint64_t bytes);
// Accepts "250ms", "30s", "5m", "1h", or a bare number of seconds; returns milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

}  // namespace ucudnn
