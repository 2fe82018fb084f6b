// The worker's search rules (probe pruning, skipping across sizes) replayed on measured timing
// tables, against the exhaustive search: ucudnn-bench-engine --replay-pruning.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ucudnn/core/status.h"
#include "ucudnn/engine/benchmark.h"

namespace ucudnn {

// Every *.csv of `data_dir`: search cost and planned step time, the search with `pruned` (the
// worker's defaults, or the rules under study) vs exhaustive, as JSON.
Result<nlohmann::ordered_json> ReplayPruning(const std::string& data_dir, double probe_noise,
                                             BenchmarkOptions pruned = {});

}  // namespace ucudnn
