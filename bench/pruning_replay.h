// The worker's search rules (probe pruning, skipping across sizes) replayed on measured timing
// tables, against the exhaustive search (ucudnn-bench-engine --replay-pruning), and the
// limit-aware size rule on them (--replay-sizes).
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

// Every *.csv of `data_dir`: per workspace limit, what the limit-aware size rule
// (core/size_rule.h) leaves of the measured tables and what it costs the plans, as JSON.
Result<nlohmann::ordered_json> ReplaySizes(const std::string& data_dir);

}  // namespace ucudnn
