#pragma once
// The partitioned program as text: while a jit trace runs, each op adds a line saying what every
// device runs (local shapes) and which collectives move data between devices.
#include <string>
#include <vector>

namespace meshvk::exec {

// Appends a line when a trace is listening; costs nothing otherwise.
void log_op(const std::string& line);
bool logging();

class ProgramLog {
 public:
  ProgramLog();
  ~ProgramLog();
  ProgramLog(const ProgramLog&) = delete;
  ProgramLog& operator=(const ProgramLog&) = delete;
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  friend void log_op(const std::string& line);
  std::vector<std::string> lines_;
  ProgramLog* outer_;
};

}  // namespace meshvk::exec
