// The compile helpers' line protocol (plan_compiler.h).
#include "ucudnn/backends/plan_compiler.h"

#include <vector>

#include "ucudnn/core/text.h"

namespace ucudnn {

std::string TaskLine(const PlanCompiler::Task& task) {
  return task.problem_key + "\t" + std::to_string(task.batch) + "\t" + std::to_string(task.beta) +
         "\t" + task.config_key;
}

Result<PlanCompiler::Task> ParseTaskLine(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string_view::npos; start = tab + 1) {
    fields.push_back(line.substr(start, tab - start));
  }
  fields.push_back(line.substr(start));
  if (fields.size() != 4) {
    return InvalidArgument("compile task: want PROBLEM<tab>BATCH<tab>BETA<tab>CONFIG, got " +
                           QuoteForError(line));
  }
  PlanCompiler::Task task;
  task.problem_key = std::string(fields[0]);
  UCUDNN_ASSIGN_OR_RETURN(task.batch,
                          ParseInteger<int64_t>("batch", fields[1], 1, int64_t{1} << 40));
  UCUDNN_ASSIGN_OR_RETURN(task.beta, ParseInteger<int>("beta", fields[2], 0, 1));
  task.config_key = std::string(fields[3]);
  if (task.problem_key.empty() || task.config_key.empty()) {
    return InvalidArgument("compile task: empty key in " + QuoteForError(line));
  }
  return task;
}

bool ReadLine(std::FILE* in, std::string& line) {
  line.clear();
  for (int c; (c = std::fgetc(in)) != EOF;) {
    if (c == '\n') return true;
    line.push_back(static_cast<char>(c));
  }
  return false;
}

}  // namespace ucudnn
