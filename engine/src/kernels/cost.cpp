#include "kernels/cost.hpp"

#include <algorithm>

#include "kernels/elementwise.hpp"
#include "meshvk/mesh.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::kernels {

namespace {
thread_local CostLog* active_log = nullptr;
// Launchers entered (and collectives running): only the outermost counts.
thread_local int depth = 0;

// XLA's HloCostAnalysis: these count as transcendentals, every other arithmetic op as one flop
// per element (the inverse and hyperbolic functions, which JAX lowers to several ops, count as one
// transcendental each here).
bool transcendental(EwOp op) {
  switch (op) {
    case EwOp::exp: case EwOp::log: case EwOp::sqrt: case EwOp::rsqrt: case EwOp::sin:
    case EwOp::cos: case EwOp::tanh: case EwOp::sigmoid: case EwOp::tan: case EwOp::asin:
    case EwOp::acos: case EwOp::atan: case EwOp::erf: case EwOp::erfinv: case EwOp::expm1:
    case EwOp::log1p: case EwOp::sinh: case EwOp::cosh: case EwOp::exp2: case EwOp::log2:
    case EwOp::asinh: case EwOp::acosh: case EwOp::atanh: case EwOp::pow: case EwOp::atan2:
      return true;
    default:
      return false;
  }
}

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

void CountedOp::note(detail::Recording& rec, const OpCost& cost, OpKind kind, DType dtype) {
  CostLog* log = CostLog::active();
  log->add(rec.device, cost);
  // Inside a collective's work the event is kept too: a reshard that moves nothing between
  // devices is its copies (Lowered::estimate charges a collective's node its collective time).
  CostEvent e;
  e.kind = kind;
  e.device = rec.device;
  e.cost = cost;
  e.dtype = dtype;
  rec.work.push_back(log->add_event(std::move(e)));
}

CollectiveWork::CollectiveWork() : saved_(detail::current_collective_work()) {
  if (saved_ || !active_log) return;
  CostEvent e;
  e.kind = OpKind::collective;
  detail::current_collective_work() = active_log->add_event(std::move(e));
  opened_ = true;
}

CollectiveWork::~CollectiveWork() {
  if (opened_) detail::current_collective_work() = saved_;
}

void CollectiveWork::log(const std::string& kind, const std::vector<std::string>& axes, uint64_t bytes, const Mesh* mesh) {
  if (!active_log) return;
  const uint32_t open = detail::current_collective_work();
  // Only an event of this log that nothing filled in yet (an all-reduce inside a reshard's
  // work logs its own line: the first wins).
  CostEvent* e = nullptr;
  if (open && open <= active_log->events().size() && active_log->event(open).collective.empty())
    e = &active_log->event(open);
  if (!e) {
    CostEvent fresh;
    fresh.kind = OpKind::collective;
    e = &active_log->event(active_log->add_event(std::move(fresh)));
  }
  e->collective = kind;
  e->axes = axes;
  e->bytes = bytes;
  e->axis_sizes.clear();
  for (const auto& a : axes) {
    const auto& names = mesh ? mesh->axis_names() : std::vector<std::string>{};
    const bool known = std::find(names.begin(), names.end(), a) != names.end();
    e->axis_sizes.push_back(known ? mesh->axis_size(a) : 1);
  }
}

UncountedScope::UncountedScope() { ++depth; }
UncountedScope::~UncountedScope() { --depth; }

// The program over `count` output elements: each node once per element (inputs, constants and
// casts are free), every input read once (a broadcast one: only the elements it has), the output
// written once.
OpCost elementwise_cost(const EwProgram& p, std::span<const EwInput> inputs, const Shape& shape, uint64_t count) {
  OpCost c;
  for (const EwNode& node : p.nodes) {
    if (node.op == EwOp::input || node.op == EwOp::constant || node.op == EwOp::cast) continue;
    (transcendental(node.op) ? c.transcendentals : c.flops) += count;
  }
  c.bytes = count * dtype_size(p.nodes.back().dtype);
  for (const EwInput& in : inputs) {
    uint64_t elements = count;
    if (in.mode == EwInput::Mode::scalar) elements = 1;
    if (in.mode == EwInput::Mode::strided) {
      elements = 1;
      for (size_t d = 0; d < shape.size() && d < in.strides.size(); ++d)
        if (in.strides[d] != 0) elements *= static_cast<uint64_t>(shape[d]);
    }
    c.bytes += elements * dtype_size(in.dtype);
  }
  return c;
}

}  // namespace meshvk::kernels
