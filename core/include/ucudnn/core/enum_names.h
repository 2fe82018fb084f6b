// The machinery behind the names of enums: one constexpr table per enum (problem.cc, dp.cc, the
// store's values.cc), looked up both ways, with one error form.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "ucudnn/core/status.h"

namespace ucudnn {

// What ToString gives for a value that has no name (an out-of-range cast).
inline constexpr std::string_view kUnnamedEnumValue = "invalid";

template <typename Enum>
struct NamedValue {
  std::string_view name;
  Enum value;
};
template <typename Enum, size_t N>
using NameTable = std::array<NamedValue<Enum>, N>;

// The first name of `value` in `names`, kUnnamedEnumValue when there is none.
template <typename Enum, size_t N>
constexpr std::string_view NameOf(Enum value, const NameTable<Enum, N>& names) {
  for (const auto& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return kUnnamedEnumValue;
}

// The value named exactly `name`, if any.
template <typename Enum, size_t N>
constexpr std::optional<Enum> ValueNamed(std::string_view name, const NameTable<Enum, N>& names) {
  for (const auto& entry : names) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// The names of `names` for a message: "a, b, c", or "a, b or c" with `last` = " or ".
template <typename Enum, size_t N>
std::string ListNames(const NameTable<Enum, N>& names, std::string_view last = ", ") {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? last : std::string_view(", ");
    out += names[i].name;
  }
  return out;
}

// The value named `text` exactly; else kInvalidArgument
// `what: unknown value "text" (expected one of a, b, c)`.
template <typename Enum, size_t N>
Result<Enum> ParseName(std::string_view what, std::string_view text,
                       const NameTable<Enum, N>& names) {
  if (std::optional<Enum> value = ValueNamed(text, names)) return *value;
  return InvalidArgument(std::string(what) + ": unknown value \"" + std::string(text) +
                         "\" (expected one of " + ListNames(names) + ")");
}

// What a person typed, in the form the tables hold: trimmed, ASCII lower case, '-' as '_'.
std::string NormalizeChoice(std::string_view text);

}  // namespace ucudnn
