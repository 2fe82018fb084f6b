// The client library's local plan cache parser (client/src/plan_cache.h), fed arbitrary file
// contents. Half of the inputs are taken as the payload and framed with a valid header, size and
// checksum, so the fuzzer reaches the record decoding past the checksum. Rejections are
// INVALID_ARGUMENT (FAILED_PRECONDITION for a record of a newer schema); accepted files serialise
// and parse back to the same records.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "plan_cache.h"
#include "ucudnn/core/problem.h"

namespace {

void PutLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ucudnn;        // NOLINT(google-build-using-namespace)
  using namespace ucudnn::fuzz;  // NOLINT(google-build-using-namespace)
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file;
  if (data[0] & 1) {
    file = std::string(rest);
  } else {
    file = std::string(client::kPlanCacheMagic) + " " + std::to_string(client::kPlanCacheVersion) +
           "\n";
    PutLe(file, rest.size(), 8);
    PutLe(file, Fnv1a64(rest), 8);
    file += rest;
  }
  auto records = client::ParseCache(file);
  if (!records.ok()) {
    // FAILED_PRECONDITION: a record from a newer build (schema_version), passed on by FromProto.
    Require(records.status().code() == StatusCode::kInvalidArgument ||
                records.status().code() == StatusCode::kFailedPrecondition,
            "unexpected error code", records.status().ToString());
    return 0;
  }
  for (const auto& record : *records) (void)client::CacheKey(record);
  const std::string saved = client::SerializeCache(*records);
  auto again = client::ParseCache(saved);
  Require(again.ok(), "a parsed cache does not parse after saving", again.status().ToString());
  Require(again->size() == records->size(), "record count changed");
  for (size_t i = 0; i < records->size(); ++i) {
    Require(client::CacheKey((*again)[i]) == client::CacheKey((*records)[i]),
            "a record changed in the round trip");
  }
  Require(client::SerializeCache(*again) == saved, "serialisation is not stable");
  return 0;
}
