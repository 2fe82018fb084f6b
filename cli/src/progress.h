// A progress bar on a terminal, periodic log lines elsewhere (pipes, CI logs).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ucudnn::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();
  // Shows `done` of total with a short detail ("conv2/fwd mb=64"). Cheap to call often.
  void Update(int64_t done, const std::string& detail = "");
  void SetTotal(int64_t total) { total_ = total; }
  void Finish();

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
};

}  // namespace ucudnn::cli
