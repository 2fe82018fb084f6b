// What the database already knows about a device, used to search less: a configuration that lost
// by a wide margin on every nearby shape of the same device is not timed at large micro-batch
// sizes of a new problem (BenchmarkOptions::prior). Pure; the worker or the benchmark gives it
// the nearby tables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ucudnn/core/problem.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// "Nearby": another problem with the same op, data and compute types, layout, math, filter
// size, padding, stride, dilation and groups, whose input and output channels are each within a
// factor of 2 of `problem`'s (spatial size free: a network's stages trade channels for it).
bool Nearby(const ConvProblem& problem, const ConvProblem& other);

// A configuration this many times slower than one needing at most its workspace, at the same
// micro-batch size, lost by a wide margin. Three times the within-problem skip factor's 2x:
// across shapes rankings shift (tile shapes fit channel counts differently), so only a loss far
// beyond that shift and beyond any idle-GPU noise (a few percent) counts.
inline constexpr double kPriorLossFactor = 3.0;
// Evidence from at least this many nearby problems, or none is used.
inline constexpr int kPriorMinNeighbours = 2;
// Only micro-batch sizes from this one up are skipped: small sizes stay measured, so a
// configuration that wins small segments (or a tight workspace) is never lost to the prior, and
// the large sizes are where the benchmark's time goes.
inline constexpr int64_t kPriorFromMicroBatch = 16;

struct KnownTable {
  ConvProblem problem;
  TimingTable table;
};

// Configurations (AlgorithmText keys) to skip at micro-batch sizes >= kPriorFromMicroBatch of
// `problem`, each with the reason recorded in its place: at least kPriorMinNeighbours nearby
// tables of `known` measured it at such sizes, and on every one of them it lost by
// kPriorLossFactor at every such size it was measured at. Any counter-evidence (one size of one
// nearby table where it did not lose) keeps it.
std::map<std::string, std::string> PriorLosers(const ConvProblem& problem,
                                               const std::vector<KnownTable>& known);

}  // namespace ucudnn
