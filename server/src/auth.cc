#include "ucudnn/server/auth.h"

#include <cctype>
#include <fstream>

#include "ucudnn/core/text.h"

namespace ucudnn::server {
namespace {

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

Result<Role> ParseRole(std::string_view text) {
  for (Role role : {Role::kRead, Role::kPlan, Role::kSubmit, Role::kAdmin}) {
    if (text == RoleName(role)) return role;
  }
  return InvalidArgument("role: must be read, plan, submit or admin, got " + QuoteForError(text));
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

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kPlan:
      return "plan";
    case Role::kSubmit:
      return "submit";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

Result<AnonymousAccess> ParseAnonymousRole(std::string_view text) {
  if (text == "none") return AnonymousAccess{false, Role::kRead, false};
  if (text == "read") return AnonymousAccess{true, Role::kRead, false};
  if (text == "plan") return AnonymousAccess{true, Role::kPlan, false};
  if (text == "open") return AnonymousAccess{true, Role::kPlan, true};
  return InvalidArgument("anonymous role: must be none, read, plan or open, got " +
                         QuoteForError(text));
}

TokenAuthenticator::TokenAuthenticator(RoleTokens tokens, AnonymousAccess anonymous)
    : anonymous_(anonymous) {
  auto add = [&](std::vector<std::string>& list, Role role) {
    for (auto& token : list) {
      if (!token.empty()) tokens_.push_back({std::move(token), role});
    }
  };
  add(tokens.admin, Role::kAdmin);
  add(tokens.plan, Role::kPlan);
  add(tokens.submit, Role::kSubmit);
  add(tokens.read, Role::kRead);
}

TokenAuthenticator::TokenAuthenticator(std::vector<std::string> admin_tokens)
    : TokenAuthenticator(RoleTokens{std::move(admin_tokens), {}, {}, {}}, AnonymousAccess{}) {}

Result<Caller> TokenAuthenticator::Identify(std::string_view authorization) const {
  if (authorization.empty()) {
    if (!anonymous_.allowed) {
      return Unauthenticated(
          "this server needs 'authorization: Bearer TOKEN' metadata for every call");
    }
    return Caller{anonymous_.role, anonymous_.registers_devices};
  }
  constexpr std::string_view kScheme = "bearer ";
  if (!StartsWithCaseInsensitive(authorization, kScheme)) {
    return Unauthenticated("authorization metadata must use the Bearer scheme");
  }
  const std::string_view presented = Trim(authorization.substr(kScheme.size()));
  // Every token is compared, so the time taken does not say which one (if any) matched.
  bool match = false;
  Role role = Role::kRead;
  for (const auto& entry : tokens_) {
    const bool equal = ConstantTimeEquals(presented, entry.token);
    if (equal && (!match || entry.role > role)) role = entry.role;
    match |= equal;
  }
  if (!match) return Unauthenticated("invalid bearer token");
  return Caller{role, MayRegisterDevices(role)};
}

Result<RoleTokens> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("token-file: cannot open '" + path + "'");
  RoleTokens tokens;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view text = Trim(line);
    if (text.empty() || text.front() == '#') continue;
    const size_t space = text.find_first_of(" \t");
    if (space == std::string_view::npos) {
      tokens.admin.emplace_back(text);
      continue;
    }
    auto role = ParseRole(text.substr(0, space));
    if (!role.ok()) {
      return InvalidArgument("token-file '" + path + "' line " + std::to_string(number) + ": " +
                             std::string(role.status().message()));
    }
    const std::string token(Trim(text.substr(space + 1)));
    switch (*role) {
      case Role::kAdmin:
        tokens.admin.push_back(token);
        break;
      case Role::kPlan:
        tokens.plan.push_back(token);
        break;
      case Role::kSubmit:
        tokens.submit.push_back(token);
        break;
      case Role::kRead:
        tokens.read.push_back(token);
        break;
    }
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
