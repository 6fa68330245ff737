#pragma once
// What each op costs on the device that runs it, counted while a jit trace listens (graph/jit.cpp
// opens a CostLog; Lowered::cost_analysis() reports it). Counted at the launchers' entry points
// (record_matmul, record_elementwise, ...), once per op and device piece, from the shapes the op
// was given, not from the dispatches a launcher happens to split it into: the numbers are the
// same on every adapter. The rules are meshvk::CostAnalysis's (meshvk/jit.hpp).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "meshvk/dtype.hpp"

namespace meshvk {
class Mesh;
}
namespace meshvk::detail {
struct Recording;
}

namespace meshvk::kernels {

struct EwProgram;
struct EwInput;

// The launchers that move 32-bit words whatever the element type (copies, gathers, fills).
constexpr uint64_t kWordBytes = sizeof(uint32_t);

struct OpCost {
  uint64_t flops = 0;
  uint64_t transcendentals = 0;
  uint64_t bytes = 0;  // read plus written
  OpCost& operator+=(const OpCost& o) {
    flops += o.flops;
    transcendentals += o.transcendentals;
    bytes += o.bytes;
    return *this;
  }
};

// What one op or collective of a trace cost, for Lowered::estimate (meshvk/estimate.hpp): the
// trace's submissions name these by id (Recording::work, current_collective_work()).
enum class OpKind : uint8_t { copy, elementwise, reduce, matmul, collective };
struct CostEvent {
  OpKind kind = OpKind::copy;
  int device = -1;  // a kernel's device; -1 for a collective (every device that runs it)
  OpCost cost;      // a kernel's
  DType dtype = DType::float32;
  // A collective: HLO's kind ("" until the op that opened it logs it: then it moved nothing
  // between devices), the mesh axes, their sizes, and what each device sends as
  // meshvk::CollectiveRecord counts it.
  std::string collective;
  std::vector<std::string> axes;
  std::vector<int> axis_sizes;
  uint64_t bytes = 0;
};

// Per device: the sum of what the ops counted while it was the thread's innermost log.
class CostLog {
 public:
  CostLog();
  ~CostLog();
  CostLog(const CostLog&) = delete;
  CostLog& operator=(const CostLog&) = delete;
  const std::map<int, OpCost>& per_device() const { return per_device_; }
  // The thread's log, or null when no trace listens.
  static CostLog* active();
  void add(int device, const OpCost& cost) { per_device_[device] += cost; }
  // Every op and collective in trace order; an event's id is its index + 1.
  const std::vector<CostEvent>& events() const { return events_; }
  uint32_t add_event(CostEvent e) {
    events_.push_back(std::move(e));
    return static_cast<uint32_t>(events_.size());
  }
  CostEvent& event(uint32_t id) { return events_[id - 1]; }

 private:
  std::map<int, OpCost> per_device_;
  std::vector<CostEvent> events_;
  CostLog* outer_;
};

// A loop replays its body's recording: the body's trace counted one iteration, and each further
// one counts the same again. Made before the body's trace, end() after it, repeat() once per
// further iteration (a loop nested in the body is in the body's count with its whole trip count).
class CostRepeat {
 public:
  CostRepeat();
  void end();
  void repeat() const;

 private:
  CostLog* log_;
  std::map<int, OpCost> before_, body_;
};

// Counts `cost` on `device` unless an enclosing launcher already counts the op (a launcher that
// calls another for a part of its work), or a collective runs it (a collective's local sums and
// copies are its communication, reported as bytes communicated, not as flops or bytes accessed).
class CountedOp {
 public:
  // `cost` is built only while a log listens. The op is recorded into `rec`, which keeps the
  // id of its cost event (for Lowered::estimate).
  template <class F>
  CountedOp(detail::Recording& rec, F&& cost, OpKind kind = OpKind::copy, DType dtype = DType::float32) {
    if (enter()) note(rec, cost(), kind, dtype);
  }
  ~CountedOp();
  CountedOp(const CountedOp&) = delete;
  CountedOp& operator=(const CountedOp&) = delete;

 private:
  bool enter();
  static void note(detail::Recording& rec, const OpCost& cost, OpKind kind, DType dtype);
};

// While alive, the submissions the thread makes belong to one collective (or reshard): while a
// trace listens it opens a cost event, which log() fills in. Nested ones join the outermost.
class CollectiveWork {
 public:
  CollectiveWork();
  ~CollectiveWork();
  CollectiveWork(const CollectiveWork&) = delete;
  CollectiveWork& operator=(const CollectiveWork&) = delete;
  // The collective's kind, mesh axes and bytes per device (exec::log_collective calls it);
  // outside any CollectiveWork it opens an event of its own, which no submission names.
  static void log(const std::string& kind, const std::vector<std::string>& axes, uint64_t bytes, const Mesh* mesh);

 private:
  uint32_t saved_ = 0;
  bool opened_ = false;
};

// While alive, launchers count nothing (a collective's own kernels).
class UncountedScope {
 public:
  UncountedScope();
  ~UncountedScope();
  UncountedScope(const UncountedScope&) = delete;
  UncountedScope& operator=(const UncountedScope&) = delete;
};

// A fused elementwise program over `count` output elements of `shape` (record_elementwise's).
OpCost elementwise_cost(const EwProgram& p, std::span<const EwInput> inputs, const Shape& shape, uint64_t count);

}  // namespace meshvk::kernels
