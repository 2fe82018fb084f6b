// Timing tables as CSV files: the format of the measured H100 data (data/h100/README.md) and of
// the worker's offline mode, with the device it was measured on in '#' header lines (at the end).
//
// Required columns (any order, matched by header name):
//   layer,n,c,h,w,k,r,s,pad,stride,dtype,layout,op,micro_batch,algo,time_ms,workspace_bytes
// `pad` and `stride` apply to both spatial dimensions, dilation and groups are 1, compute type is
// fp32, math is `default` for fp32 data and `tensor_op` otherwise (the measured data's settings).
// Optional columns, written only when some row needs them, so files of ordinary problems keep
// exactly the columns above:
//   pad_w,stride_w,dilation_h,dilation_w,groups,ctype,math  (then `pad`/`stride` are the h parts)
//   status,spread_ms,samples,error                            (status: ok, unsupported, failed)
//   d,t,pad_d,stride_d,dilation_d                             (3-D problems; 1,1,0,1,1 is 2-D)
// `algo` is a legacy algorithm's number, or a cuDNN graph-API engine configuration's canonical
// key ("eng34{k3=2;k14=-1}", EngineConfigKey(); it has no commas, so no new column is needed and
// older files read as before), or the framework's own convolution, "framework(<identity>)"
// (quoted when the identity needs it).
// Lines starting with '#' and blank lines are ignored; fields may be double-quoted ("" escapes a
// quote). dtype, layout, op and status are case-insensitive.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/fingerprint.h"
#include "ucudnn/core/problem.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn {

// Every timing of one problem, with the names the file gave it.
struct ProblemTimings {
  ConvProblem problem;
  std::string layer;       // the `layer` column of the problem's first row
  int64_t mini_batch = 0;  // the `n` column of the problem's first row
  TimingTable table;       // in file order
  bool operator==(const ProblemTimings& other) const {
    return problem == other.problem && layer == other.layer && mini_batch == other.mini_batch &&
           table.entries == other.table.entries;
  }
};

// Keyed by CanonicalKey(problem): iteration order is deterministic.
using TimingTables = std::map<std::string, ProblemTimings>;

// Parses CSV text. Errors (kInvalidArgument) name the line and column: a missing required
// column, a malformed number or engine key, an invalid problem, or a repeated (micro_batch, algo
// or engine configuration) of a problem.
Result<TimingTables> ParseTimingCsv(std::string_view text);

// Reads and parses a file; kNotFound when it cannot be opened (the message names the path).
Result<TimingTables> ReadTimingCsvFile(const std::string& path);

// Writes `tables` in key order, each problem's rows in table order; ParseTimingCsv reads it back
// equal (times in the shortest text that reads back exactly; line breaks inside an error text
// become spaces). kInvalidArgument for a problem that fails Validate(), a layer name with a line
// break, or a time that is negative or not finite.
Result<std::string> WriteTimingCsv(const TimingTables& tables);

// The table of `problem`, or nullptr.
const TimingTable* FindTimings(const TimingTables& tables, const ConvProblem& problem);

// The device a file's timings were measured on travels in its '#' header lines, which the CSV
// reader skips (the worker's offline mode and `ucudnn cpu-bench` write them, `ucudnn import`
// reads them):
//   # ucudnn timings written by ucudnn-worker --offline
//   # device.backend: cudnn
//   # device.name: NVIDIA H100 80GB HBM3
//   # device.cc: 9.0
//   # device.sm_count: 132
//   # device.memory_bytes: 84929347584
//   # device.cudnn_version: 91400
//   # device.cuda_runtime_version: 13000
//   # device.blas:
//   # device.key: v1;backend=cudnn;...   (checked when read)
//   # device.hash: 0123456789abcdef
//   # <free-form notes: network, batch, policy, time>
// The header lines (each ending in '\n') that carry `device`, then `notes`.
std::string DeviceHeader(const DeviceFingerprint& device, const std::vector<std::string>& notes);
// The fingerprint from a file's "# device.*" lines: kNotFound when it has none, kInvalidArgument
// when they are malformed, incomplete, fail Validate(), or contradict "# device.key".
Result<DeviceFingerprint> ParseDeviceHeader(std::string_view csv_text);

}  // namespace ucudnn
