// Small text helpers shared by the core's parsers (network tables, timing CSV files, byte sizes,
// /proc files): integers, case, whitespace, UTF-8, and CSV records read line by line. Pure: no
// I/O. Header-only, so every target that compiles a core source file gets them without linking
// anything new.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn {

// ASCII letters lowercased; every other byte (UTF-8 included) unchanged.
inline std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// ASCII letters uppercased; every other byte unchanged.
inline std::string Uppercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// `s` without leading and trailing spaces, tabs, CR, LF, VT and FF.
inline std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

// Strict UTF-8: no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF, no truncated
// sequence. ASCII (NUL included) is valid.
inline bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t extra = 0;
    uint32_t code_point = 0;
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
    constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (code_point < kMinForLength[extra] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

// Whether `s` holds an ASCII control character (0x00-0x1F or 0x7F: NUL, tab, line breaks, ...).
inline bool HasControlCharacter(std::string_view s) {
  for (char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) return true;
  }
  return false;
}

// `text` for an error message: quoted, at most 40 bytes of it (then "..."), control characters
// as '?', so that hostile input cannot make messages long or multi-line.
inline std::string QuoteForError(std::string_view text) {
  constexpr size_t kMaxShown = 40;
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    out += byte < 0x20 || byte == 0x7F ? '?' : text[i];
  }
  if (text.size() > kMaxShown) out += "...";
  return out + "'";
}

// The whole of `text` as a decimal integer of type T: an optional '-' (signed types only), then
// digits; no '+', no spaces, no other base. Errors (kInvalidArgument) name `field`:
//   "c: not an integer: 'x'", "c: out of range for a 32-bit integer: '99999999999'".
template <typename T>
Result<T> ParseInteger(std::string_view field, std::string_view text) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "ParseInteger: integer types");
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range) {
    return InvalidArgument(
        std::string(field) + ": out of range for a " + std::to_string(sizeof(T) * 8) +
        (std::is_signed_v<T> ? "-bit integer: " : "-bit unsigned integer: ") + QuoteForError(text));
  }
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return InvalidArgument(std::string(field) + ": not an integer: " + QuoteForError(text));
  }
  return value;
}

// ParseInteger, then within [min, max]: "groups: must be in [1, 65536], got 0".
template <typename T>
Result<T> ParseInteger(std::string_view field, std::string_view text, T min, T max) {
  Result<T> value = ParseInteger<T>(field, text);
  if (value.ok() && (*value < min || *value > max)) {
    return InvalidArgument(std::string(field) + ": must be in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "], got " + std::to_string(*value));
  }
  return value;
}

// A yes/no setting, trimmed and case-insensitive: 1, true, yes, on / 0, false, no, off.
// Error (kInvalidArgument): "UCUDNN_TLS: must be one of 1, 0, true, false, yes, no, on, off, got
// 'maybe'".
inline Result<bool> ParseBool(std::string_view field, std::string_view text) {
  const std::string s = Lowercase(Trim(text));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  return InvalidArgument(std::string(field) +
                         ": must be one of 1, 0, true, false, yes, no, on, off, got " +
                         QuoteForError(text));
}

// Splits one CSV record at commas. A field may be double-quoted, with "" for a quote inside
// (then it may hold commas); nothing may follow a closing quote but a comma. Fields are not
// trimmed. Errors: "unterminated quoted field", "text after a closing quote".
inline Result<std::vector<std::string>> SplitCsvRecord(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  size_t i = 0;
  while (true) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) return InvalidArgument("unterminated quoted field");
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',') return InvalidArgument("text after a closing quote");
    } else {
      const size_t comma = line.find(',', i);
      const size_t end = comma == std::string_view::npos ? line.size() : comma;
      field.assign(line.substr(i, end - i));
      i = end;
    }
    fields.push_back(field);
    if (i >= line.size()) return fields;
    ++i;  // the comma
  }
}

// Reads CSV text one content line at a time: "\n" or "\r\n" ends a line, line numbers start at 1,
// and blank lines (nothing but whitespace) and comment lines (first byte '#') are skipped.
//
//   CsvLineReader lines(text);
//   std::string_view line;
//   while (lines.Next(line)) { ... return InvalidArgument(lines.Where() + ": ..."); }
class CsvLineReader {
 public:
  explicit CsvLineReader(std::string_view text) : rest_(text) {}

  // The next content line, without its line end, into `line`; false at the end of the text.
  bool Next(std::string_view& line) {
    while (!rest_.empty()) {
      const size_t newline = rest_.find('\n');
      line = rest_.substr(0, newline);
      rest_ = newline == std::string_view::npos ? std::string_view() : rest_.substr(newline + 1);
      ++line_number_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (Trim(line).empty() || line.front() == '#') continue;
      return true;
    }
    return false;
  }

  // The number of the line that Next() returned last (1-based; 0 before the first).
  int line_number() const { return line_number_; }
  // "line 12": the prefix of an error about that line.
  std::string Where() const { return "line " + std::to_string(line_number_); }

 private:
  std::string_view rest_;
  int line_number_ = 0;
};

}  // namespace ucudnn
