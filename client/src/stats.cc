#include "ucudnn/client/stats.h"

namespace ucudnn {

std::string_view ToString(KernelReport::State state) {
  switch (state) {
    case KernelReport::State::kWaiting:
      return "waiting";
    case KernelReport::State::kPlanned:
      return "planned";
    case KernelReport::State::kMissing:
      return "missing";
    case KernelReport::State::kInfeasible:
      return "infeasible";
    case KernelReport::State::kNoServer:
      return "no_server";
    case KernelReport::State::kPlanFailed:
      return "plan_failed";
  }
  return "?";
}

}  // namespace ucudnn
