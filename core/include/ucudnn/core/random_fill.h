// Deterministic, non-zero pseudo-random test and benchmark data, generated on the host in the
// tensor's own element type and copied to a backend's memory. Every element is a pure function of
// (seed, index), so data made in chunks equals data made at once, on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"

namespace ucudnn {

// The value of element `index` for `seed`: uniform magnitude in [0.1, 1], random sign. Never zero,
// also after rounding to fp16 or bf16.
float RandomValue(uint64_t seed, uint64_t index);

// IEEE 754 binary16 and bfloat16 conversions, rounding to nearest even (NaN stays NaN, overflow
// goes to infinity, fp16 subnormals are kept).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

// Writes `count` elements of `type` starting at element `first_index` of the (seed) sequence.
void GenerateRandom(void* host_dst, size_t count, DataType type, uint64_t seed,
                    uint64_t first_index = 0);

// Generates `count` elements on the host and copies them to `device_dst`, in bounded chunks so
// large tensors need little host memory.
Status FillRandom(ConvBackend& backend, void* device_dst, size_t count, DataType type,
                  uint64_t seed);

// Benchmark operands, where only the time matters: element i is RandomValue(seed, i % period),
// so only `period` elements are generated on the host and the rest are copied on the device
// (doubling), which makes filling a multi-GiB tensor cost milliseconds instead of a minute of
// host time. Non-zero and deterministic like FillRandom. The period (default 256 Ki elements,
// 1 MiB of fp32) is far above any cache line and caches match addresses, not values, so no
// hardware can exploit the repetition; generating it costs the host 5-30 ms (4 Mi elements cost
// 120-280 ms, two of them per benchmarked problem: most of a cold worker's operand time on the
// H100, docs/engines.md). Backends without CopyWithinDevice get FillRandom's data.
inline constexpr size_t kRandomTilePeriod = size_t{1} << 18;
Status FillRandomTiled(ConvBackend& backend, void* device_dst, size_t count, DataType type,
                       uint64_t seed, size_t period = kRandomTilePeriod);

// Host data of `type` widened to float, for comparisons.
std::vector<float> ToFloat(const void* host, size_t count, DataType type);

}  // namespace ucudnn
