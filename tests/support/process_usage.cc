#include "support/process_usage.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace ucudnn::test_support {

ProcessUsage ReadProcessUsage(pid_t pid) {
  ProcessUsage usage;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    auto value = [&] { return std::atof(line.c_str() + line.find(':') + 1); };
    if (line.rfind("Threads:", 0) == 0) usage.threads = static_cast<int>(value());
    if (line.rfind("VmRSS:", 0) == 0) usage.rss_mb = value() / 1024;
    if (line.rfind("VmHWM:", 0) == 0) usage.peak_rss_mb = value() / 1024;
  }
  // Fields 14 and 15 of stat, after the command name in parentheses.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return usage;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::atof(field.c_str());
  }
  usage.cpu_seconds = ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  return usage;
}

}  // namespace ucudnn::test_support
