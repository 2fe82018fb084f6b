#include "ucudnn/engine/measurement_gate.h"

#include <cmath>
#include <cstdio>

namespace ucudnn {

bool Contended(const DeviceActivity& after, double relative_spread, int samples,
               double max_relative_spread) {
  if (after.known && after.other_processes > 0) return true;
  // Fewer than 4 samples have no interquartile range worth judging.
  return max_relative_spread > 0 && samples >= 4 && std::isfinite(relative_spread) &&
         relative_spread > max_relative_spread;
}

std::string ConditionsJson(const MeasurementConditions& c) {
  // Every field is a number, a boolean or a gate name from our own code (no escaping needed).
  char spread[32];
  std::snprintf(spread, sizeof(spread), "%.4g",
                std::isfinite(c.relative_spread) ? c.relative_spread : 0.0);
  std::string json = "{\"idle_gate\":\"" + c.gate + "\"";
  json += ",\"device_known\":" + std::string(c.after.known ? "true" : "false");
  if (c.after.known) {
    json += ",\"busy_after\":" + std::string(c.after.other_processes > 0 ? "true" : "false");
    json += ",\"other_processes\":" + std::to_string(c.after.other_processes);
    if (c.after.utilization_percent >= 0) {
      json += ",\"utilization_percent\":" + std::to_string(c.after.utilization_percent);
    }
  }
  json += ",\"relative_spread\":" + std::string(spread);
  json += ",\"remeasured\":" + std::to_string(c.remeasured);
  json += ",\"contended\":" + std::string(c.contended ? "true" : "false") + "}";
  return json;
}

}  // namespace ucudnn
