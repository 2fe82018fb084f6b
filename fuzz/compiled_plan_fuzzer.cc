// The compiled-plan store's file decoder (core/include/ucudnn/core/compiled_plans.h), fed
// arbitrary file contents for a fixed key. Half of the inputs are taken as the payload and
// encoded properly, which must decode to the same payload; the other half as the whole file,
// which decodes or is refused with INVALID_ARGUMENT, and a payload it decodes to encodes to a
// file that decodes to it again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "ucudnn/core/compiled_plans.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ucudnn;        // NOLINT(google-build-using-namespace)
  using namespace ucudnn::fuzz;  // NOLINT(google-build-using-namespace)
  if (size == 0) return 0;
  constexpr std::string_view kKey = "v2;backend=cudnn;name=GPU|v1;op=fwd;c=8|4|0|e=5";
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto payload = DecodeCompiledPlan(kKey, EncodeCompiledPlan(kKey, rest));
    Require(payload.ok(), "an encoded plan does not decode", payload.status().ToString());
    Require(*payload == rest, "the payload changed in the round trip");
    return 0;
  }
  auto payload = DecodeCompiledPlan(kKey, rest);
  if (!payload.ok()) {
    Require(payload.status().code() == StatusCode::kInvalidArgument, "unexpected error code",
            payload.status().ToString());
    return 0;
  }
  auto again = DecodeCompiledPlan(kKey, EncodeCompiledPlan(kKey, *payload));
  Require(again.ok() && *again == *payload, "a decoded payload does not round-trip");
  return 0;
}
