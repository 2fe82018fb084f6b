// Bearer-token check for the writing RPCs (TimingService). Reads need no token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn::server {

// Compares in time that depends only on `expected`'s length, never on where the first difference
// is, so a caller cannot learn a token byte by byte from response times.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

class TokenAuthenticator {
 public:
  // Empty tokens are ignored. With no token at all every write is refused: an unconfigured server
  // must not accept timings from anyone.
  explicit TokenAuthenticator(std::vector<std::string> tokens);

  // `authorization` is the value of the "authorization" metadata entry, empty when absent.
  // Accepts "Bearer TOKEN" (scheme case-insensitive) for any configured token; otherwise
  // kUnauthenticated with a message that never echoes the presented token.
  Status Check(std::string_view authorization) const;
  bool has_tokens() const { return !tokens_.empty(); }

 private:
  std::vector<std::string> tokens_;
};

// Tokens from a file: one per line, surrounding whitespace trimmed, blank lines and lines starting
// with '#' skipped.
Result<std::vector<std::string>> ReadTokenFile(const std::string& path);
// "a, b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitTokenList(std::string_view list);

}  // namespace ucudnn::server
