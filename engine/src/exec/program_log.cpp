#include "exec/program_log.hpp"

namespace meshvk::exec {

namespace {
thread_local ProgramLog* active = nullptr;
}

ProgramLog::ProgramLog() : outer_(active) { active = this; }
ProgramLog::~ProgramLog() { active = outer_; }

bool logging() { return active != nullptr; }

void log_op(const std::string& line) {
  if (active) active->lines_.push_back(line);
}

void log_collective(const std::string& kind, uint64_t bytes, const std::string& line) {
  if (!active) return;
  active->lines_.push_back(line);
  active->collectives_.push_back({kind, bytes});
}

}  // namespace meshvk::exec
