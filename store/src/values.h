// Conversions between C++ values and their database text forms, and input checks shared by the
// store's operations. Pure functions, no I/O.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucudnn/core/plan.h"
#include "ucudnn/core/status.h"
#include "ucudnn/core/timing.h"

namespace ucudnn::store::internal {

// uint64 hashes live in BIGINT columns by bit-cast.
inline int64_t ToDb(uint64_t hash) { return std::bit_cast<int64_t>(hash); }
inline uint64_t FromDb(int64_t value) { return std::bit_cast<uint64_t>(value); }

// PostgreSQL array literals, passed as ONE bound parameter and cast in SQL ($3::int[]), so a
// whole table of timings is written by one parameterised statement.
std::string IntArrayLiteral(const std::vector<int64_t>& values);
std::string DoubleArrayLiteral(const std::vector<double>& values);  // exact round trip
std::string TextArrayLiteral(const std::vector<std::string>& values);

// Text the database accepts: NUL bytes removed (libpq passes C strings), at most `max_bytes`
// (cut on a UTF-8 character boundary).
std::string CleanText(std::string_view text, size_t max_bytes);

// Checks one timing table as PutTimings documents; the message names the entry and field:
// "timings[3].time_ms: must be finite and >= 0, got nan".
Status ValidateTimings(const std::vector<Timing>& timings);
Status ValidateMeasuredBy(const std::string& measured_by);
Status ValidateWorkerId(const std::string& worker_id);
// A job's workspace limit: std::nullopt or at most kMaxJobWorkspaceLimit.
Status ValidateWorkspaceLimit(std::optional<uint64_t> workspace_limit);

// Jobs' workspace limits (Job::workspace_limit), ordered by how many micro-batch sizes they need:
// a smaller limit needs more sizes than a larger one, and std::nullopt (every size) is wider than
// any number. Whether a job measured for `job` covers a request for `request`: std::nullopt
// covers every limit; a limit L covers the limits >= L and not std::nullopt.
bool WorkspaceLimitCovers(std::optional<uint64_t> job, std::optional<uint64_t> request);
// The wider of two limits: std::nullopt when either is, else the smaller.
std::optional<uint64_t> WidestWorkspaceLimit(std::optional<uint64_t> a, std::optional<uint64_t> b);

// SQL giving the RFC 3339 UTC text of a timestamptz column expression (NULL stays NULL).
std::string TimestampSql(std::string_view column);

}  // namespace ucudnn::store::internal
