#include "ucudnn/server/auth.h"

#include <cctype>
#include <fstream>

namespace ucudnn::server {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool StartsWithCaseInsensitive(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // Walks `expected` in full whatever `presented` holds; a length mismatch is folded into the
  // accumulated difference instead of returning early.
  unsigned diff = presented.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char p =
        presented.empty() ? 0 : static_cast<unsigned char>(presented[i % presented.size()]);
    diff |= p ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0 && !expected.empty();
}

TokenAuthenticator::TokenAuthenticator(std::vector<std::string> tokens) {
  for (auto& token : tokens) {
    if (!token.empty()) tokens_.push_back(std::move(token));
  }
}

Status TokenAuthenticator::Check(std::string_view authorization) const {
  if (tokens_.empty()) {
    return Unauthenticated("this server has no tokens configured; writes are disabled");
  }
  if (authorization.empty()) {
    return Unauthenticated("missing 'authorization: Bearer TOKEN' metadata");
  }
  constexpr std::string_view kScheme = "bearer ";
  if (!StartsWithCaseInsensitive(authorization, kScheme)) {
    return Unauthenticated("authorization metadata must use the Bearer scheme");
  }
  const std::string_view presented = Trim(authorization.substr(kScheme.size()));
  bool match = false;
  // Every token is compared, so the time taken does not say which one (if any) matched.
  for (const auto& token : tokens_) match |= ConstantTimeEquals(presented, token);
  if (!match) return Unauthenticated("invalid bearer token");
  return Status::Ok();
}

Result<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("token-file: cannot open '" + path + "'");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view token = Trim(line);
    if (token.empty() || token.front() == '#') continue;
    tokens.emplace_back(token);
  }
  if (in.bad()) return InvalidArgument("token-file: error reading '" + path + "'");
  return tokens;
}

std::vector<std::string> SplitTokenList(std::string_view list) {
  std::vector<std::string> tokens;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view token = Trim(list.substr(0, comma));
    if (!token.empty()) tokens.emplace_back(token);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return tokens;
}

}  // namespace ucudnn::server
