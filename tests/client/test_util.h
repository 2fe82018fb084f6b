// Shared helpers of the client library's tests: problems, operands, reference runs, waiting and
// log capture.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "log.h"
#include "support/operands.h"
#include "support/problems.h"
#include "ucudnn/core/backend.h"
#include "ucudnn/core/problem.h"

namespace ucudnn::testing {

inline ConvProblem SmallProblem(ConvOp op, int64_t stride = 1) {
  return test_support::SquareConv(op, 3, 9, 4, 3, stride);
}

// Host tensors of one call, filled with deterministic non-zero data; `out` is the output
// (y, dx or dw) with non-zero initial contents so that beta matters.
using Operands = test_support::HostOperands;
using test_support::RandomVector;

inline Operands MakeOperands(const ConvProblem& p, int64_t batch, uint64_t seed = 1) {
  EXPECT_TRUE(Validate(p).ok()) << Validate(p).ToString();
  return test_support::MakeOperands(p, batch, seed);
}

// ||a - b|| / ||b||.
inline double NormalizedL2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return ref == 0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

// Polls `done` until it holds or `timeout` passes (a wait, not a timing assertion).
inline bool WaitUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Routes the client library's logger (log.h) and spdlog's default logger (the core's messages)
// into one string for the test's duration.
class LogCapture {
 public:
  LogCapture()
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)),
        previous_(spdlog::default_logger()),
        previous_level_(client::Log().level()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
    client::Log().sinks().push_back(sink_);
    client::Log().set_level(spdlog::level::debug);
  }
  ~LogCapture() {
    auto& sinks = client::Log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    client::Log().set_level(previous_level_);
    spdlog::set_default_logger(previous_);
  }
  std::string text() {
    spdlog::default_logger()->flush();
    client::Log().flush();
    return stream_.str();
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
  spdlog::level::level_enum previous_level_;
};

// A fresh folder under the build tree's temporary space, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("ucudnn-client-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace ucudnn::testing
