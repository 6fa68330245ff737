#include "kernels/cost.hpp"

namespace meshvk::kernels {

namespace {
thread_local CostLog* active_log = nullptr;
// Launchers entered (and collectives running): only the outermost counts.
thread_local int depth = 0;
}  // namespace

CostLog::CostLog() : outer_(active_log) { active_log = this; }
CostLog::~CostLog() { active_log = outer_; }
CostLog* CostLog::active() { return active_log; }

CostRepeat::CostRepeat() : log_(active_log) {
  if (log_) before_ = log_->per_device();
}

void CostRepeat::end() {
  if (!log_ || log_ != active_log) return;
  for (const auto& [device, total] : log_->per_device()) {
    const OpCost was = before_.count(device) ? before_.at(device) : OpCost{};
    body_[device] = OpCost{total.flops - was.flops, total.transcendentals - was.transcendentals, total.bytes - was.bytes};
  }
}

void CostRepeat::repeat() const {
  if (!log_ || log_ != active_log) return;
  for (const auto& [device, cost] : body_) log_->add(device, cost);
}

bool CountedOp::enter() { return depth++ == 0 && active_log != nullptr; }
CountedOp::~CountedOp() { --depth; }

UncountedScope::UncountedScope() { ++depth; }
UncountedScope::~UncountedScope() { --depth; }

}  // namespace meshvk::kernels
