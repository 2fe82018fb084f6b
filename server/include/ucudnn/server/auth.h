// Bearer tokens with roles, for every RPC (README "Authorization"):
//   read    what a caller without a token gets by default (--anonymous-role): catalog reads and
//           plans from the timings there are; nothing is written;
//   plan    may also enqueue benchmarks (jobs, problem rows, plan-cache rows) for devices the
//           store knows (registered by a worker or a `submit`/`admin` caller);
//   submit  may submit timings (TimingService), which registers their device and problem;
//   admin   everything: plan for and register unknown devices, submit, retry failed jobs.
// A caller cannot create a device by planning unless it may register devices: a made-up device
// is planned read-only (an answer from the timings there are, nothing enqueued), so that a
// training job whose device's worker has not registered yet still gets an answer, and a flood
// of made-up devices writes nothing and adds no metric labels.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/status.h"

namespace ucudnn::server {

// Compares in time that depends only on `expected`'s length, never on where the first difference
// is, so a caller cannot learn a token byte by byte from response times.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

enum class Role { kRead = 0, kPlan = 1, kSubmit = 2, kAdmin = 3 };
std::string_view RoleName(Role role);  // "read" "plan" "submit" "admin"

inline bool MayEnqueue(Role r) { return r == Role::kPlan || r == Role::kAdmin; }
inline bool MayRegisterDevices(Role r) { return r == Role::kSubmit || r == Role::kAdmin; }
inline bool MaySubmitTimings(Role r) { return r == Role::kSubmit || r == Role::kAdmin; }
inline bool MayRetryJobs(Role r) { return r == Role::kAdmin; }

// What a caller without a token is: "none" (every call needs a token), "read" (the default:
// nothing it sends creates a row), "plan" (may enqueue for known devices), or "open" (plan, and
// register devices by planning for them: the behaviour before roles existed, for a closed
// network only).
struct AnonymousAccess {
  bool allowed = true;
  Role role = Role::kRead;
  bool registers_devices = false;
};
Result<AnonymousAccess> ParseAnonymousRole(std::string_view text);

// Who a caller is: its role, and whether it may create a device row.
struct Caller {
  Role role = Role::kRead;
  bool may_register_devices = false;
};

// Tokens by role.
struct RoleTokens {
  std::vector<std::string> admin;  // --tokens, and token-file lines without a role
  std::vector<std::string> plan;
  std::vector<std::string> submit;
  std::vector<std::string> read;  // for servers whose anonymous callers may do nothing
};

class TokenAuthenticator {
 public:
  // Empty tokens are ignored.
  TokenAuthenticator(RoleTokens tokens, AnonymousAccess anonymous);
  // Admin tokens only, anonymous callers "read".
  explicit TokenAuthenticator(std::vector<std::string> admin_tokens);

  // `authorization` is the value of the "authorization" metadata entry, empty when absent.
  // No token: the anonymous role, or kUnauthenticated when anonymous callers are refused. A
  // token: "Bearer TOKEN" (scheme case-insensitive) of a configured token gives its role;
  // anything else is kUnauthenticated with a message that never echoes the presented token.
  Result<Caller> Identify(std::string_view authorization) const;

  bool has_tokens() const { return !tokens_.empty(); }

 private:
  struct Entry {
    std::string token;
    Role role;
  };
  std::vector<Entry> tokens_;
  AnonymousAccess anonymous_;
};

// Tokens from a file, one per line: "TOKEN" (admin, as before roles existed) or "ROLE TOKEN"
// with ROLE plan, submit or admin; surrounding whitespace trimmed, blank lines and lines starting
// with '#' skipped. An unknown role is kInvalidArgument naming the line.
Result<RoleTokens> ReadTokenFile(const std::string& path);

// "a, b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitTokenList(std::string_view list);

}  // namespace ucudnn::server
