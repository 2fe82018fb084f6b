#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace ucudnn::cli {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(total),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_ - std::chrono::hours(1)) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(int64_t done, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  // A terminal redraws ten times a second; a log gets a line every five seconds.
  const auto interval = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if (now - last_print_ < interval && done < total_) return;
  last_print_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 0;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth + 0.5);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %5.1fs %s", label_.c_str(), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), seconds,
                 detail.c_str());
  } else {
    std::fprintf(stderr, "%s: %lld/%lld (%.0f%%) after %.1fs %s\n", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), fraction * 100,
                 seconds, detail.c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace ucudnn::cli
