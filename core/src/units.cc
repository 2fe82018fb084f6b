#include "ucudnn/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "ucudnn/core/text.h"

namespace ucudnn {
namespace {

// "1.5 GiB" -> "1.5gib": units are case-insensitive and spaces may appear anywhere.
std::string Normalized(std::string_view s) {
  std::string no_spaces;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) no_spaces += c;
  }
  return Lowercase(no_spaces);
}

// Splits "1.5gib" into 1.5 and "gib"; false when there is no leading number.
bool SplitNumber(const std::string& s, double* number, std::string* unit) {
  size_t end = 0;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.')) {
    ++end;
  }
  if (end == 0) return false;
  try {
    size_t used = 0;
    *number = std::stod(s.substr(0, end), &used);
    if (used != end) return false;
  } catch (...) {
    return false;
  }
  *unit = s.substr(end);
  return std::isfinite(*number) && *number >= 0;
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string s = Normalized(text);
  double number = 0;
  std::string unit;
  if (!SplitNumber(s, &number, &unit)) {
    return InvalidArgument("'" + std::string(text) + "' is not a byte size (e.g. 64MiB)");
  }
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {{"", 1},
                                    {"b", 1},
                                    {"kib", 1024.0},
                                    {"mib", 1048576.0},
                                    {"gib", 1073741824.0},
                                    {"tib", 1099511627776.0},
                                    {"kb", 1e3},
                                    {"mb", 1e6},
                                    {"gb", 1e9},
                                    {"tb", 1e12},
                                    {"k", 1024.0},
                                    {"m", 1048576.0},
                                    {"g", 1073741824.0}};
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      const double bytes = std::round(number * u.factor);
      if (bytes > 1.8e19) return InvalidArgument("'" + std::string(text) + "' is too large");
      return static_cast<uint64_t>(bytes);
    }
  }
  return InvalidArgument("'" + std::string(text) + "': unknown unit '" + unit +
                         "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024.0 && i < 4) {
    value /= 1024.0;
    ++i;
  }
  char buf[48];
  if (value == std::floor(value)) {
    std::snprintf(buf, sizeof buf, "%.0f %s", value, kNames[i]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kNames[i]);
  }
  return buf;
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  const std::string s = Normalized(text);
  double number = 0;
  std::string unit;
  if (!SplitNumber(s, &number, &unit)) {
    return InvalidArgument("'" + std::string(text) + "' is not a duration (e.g. 30s, 500ms)");
  }
  double factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit.empty() || unit == "s")
    factor = 1000;
  else if (unit == "m" || unit == "min")
    factor = 60000;
  else if (unit == "h")
    factor = 3600000;
  else
    return InvalidArgument("'" + std::string(text) + "': unknown unit '" + unit + "'");
  const double ms = std::round(number * factor);
  if (ms > 9.0e15) return InvalidArgument("'" + std::string(text) + "' is too long");
  return static_cast<int64_t>(ms);
}

}  // namespace ucudnn
