// Property checks of the fuzz targets: a violated one prints what was violated and aborts, which
// libFuzzer reports as a crash with the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ucudnn/core/status.h"

namespace ucudnn::fuzz {

inline void Require(bool condition, const char* what, const std::string& detail = {}) {
  if (condition) return;
  std::fprintf(stderr, "fuzz property violated: %s %s\n", what, detail.c_str());
  std::abort();
}

// A rejection must be a clean error value that says what is wrong: INVALID_ARGUMENT (or, for a
// plan from a newer build, FAILED_PRECONDITION) with a message naming the field first.
inline void RequireCleanRejection(const Status& status, bool allow_failed_precondition = false) {
  Require(!status.ok(), "a rejection without an error");
  Require(status.code() == StatusCode::kInvalidArgument ||
              (allow_failed_precondition && status.code() == StatusCode::kFailedPrecondition),
          "unexpected error code", status.ToString());
  const std::string& m = status.message();
  Require(!m.empty() && m.find(':') != std::string::npos && m.front() != ' ' && m.front() != ':',
          "the message does not start with a field", m);
}

}  // namespace ucudnn::fuzz
