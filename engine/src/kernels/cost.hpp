#pragma once
// What each op costs on the device that runs it, counted while a jit trace listens (graph/jit.cpp
// opens a CostLog; Lowered::cost_analysis() reports it). Counted at the launchers' entry points
// (record_matmul, record_elementwise, ...), once per op and device piece, from the shapes the op
// was given, not from the dispatches a launcher happens to split it into: the numbers are the
// same on every adapter. The rules are meshvk::CostAnalysis's (meshvk/jit.hpp).
#include <cstdint>
#include <map>
#include <span>

#include "meshvk/dtype.hpp"

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

 private:
  std::map<int, OpCost> per_device_;
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
  // `cost` is built only while a log listens.
  template <class F>
  CountedOp(int device, F&& cost) {
    if (enter()) CostLog::active()->add(device, cost());
  }
  ~CountedOp();
  CountedOp(const CountedOp&) = delete;
  CountedOp& operator=(const CountedOp&) = delete;

 private:
  bool enter();
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
