#pragma once
// The tape reverse-mode autodiff records while value_and_grad runs a function: for every op on
// a tracked value, its output, inputs and the rule that turns the output's cotangent into the
// inputs' cotangents (built from the same ops, so backward programs are partitioned like any
// other program).
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/mesh.hpp"

namespace meshvk::detail {

using Vjp = std::function<std::vector<Array>(const Array& cotangent)>;

// Records `output = op(inputs)` when a tape is active and an input is tracked; returns output.
// The rule returns one cotangent per input (an invalid Array where there is none).
Array on_tape(const Array& output, const std::vector<Array>& inputs, Vjp vjp);
// An op of several outputs (a loop, a checkpointed or custom-rule function): the rule takes one
// cotangent per output (zeros where nothing flowed back) and returns one per input.
using MultiVjp = std::function<std::vector<Array>(const std::vector<Array>& cotangents)>;
void on_tape(const std::vector<Array>& outputs, const std::vector<Array>& inputs, MultiVjp vjp);
bool taping();
// Whether an active tape tracks x (a gradient would flow to it).
bool tracked(const Array& x);
// Whether a transform's tape (a grad or jvp in progress, not a TapeIsolation's probe, which only
// notes what an isolated function reads) tracks x: x's computation will be differentiated.
bool tracked_by_a_transform(const Array& x);

// While alive, the backward pass of what runs will itself be differentiated: jvp's forward pass
// (jvp transposes the vjp). Ops whose backward pass is replayed from a recording (scan's) take a
// differentiable form instead.
class BackwardDifferentiated {
 public:
  BackwardDifferentiated();
  ~BackwardDifferentiated();
  BackwardDifferentiated(const BackwardDifferentiated&) = delete;
  BackwardDifferentiated& operator=(const BackwardDifferentiated&) = delete;
};
// Whether the backward pass of what runs now may be differentiated: inside a
// BackwardDifferentiated scope, or under more than one tape (a gradient of a gradient).
bool backward_differentiated();

// While alive, the thread's active tapes record nothing: a function traced once and run many
// times (a loop body), or whose backward pass is its own (checkpoint, custom_vjp), runs under
// it, and the op that runs it records one rule instead. closure() lists the arrays the function
// read that those tapes track (values it closes over that a gradient flows to), in first-use
// order. `inputs` are the function's own arguments (not closure). Nothing is probed, and
// closure() is empty, when no tape was active.
class TapeIsolation {
 public:
  explicit TapeIsolation(const std::vector<Array>& inputs);
  ~TapeIsolation();
  TapeIsolation(const TapeIsolation&) = delete;
  TapeIsolation& operator=(const TapeIsolation&) = delete;
  bool was_taping() const { return !saved_.empty(); }
  const std::vector<Array>& closure() const;
  // The isolated function's backward pass from what it recorded while isolated: one cotangent per
  // output in `outputs` (an invalid Array: zero) to one per array of closure() (invalid where
  // none flows), without running the function again. Valid after the isolation ends.
  std::function<std::vector<Array>(const std::vector<Array>&)> backward(const std::vector<Array>& outputs) const;
  // Whether the function read values of the body of an enclosing isolated function (a loop's
  // carry, or values computed from it), not values that body closes over.
  bool reads_enclosing_body() const;

 private:
  std::vector<void*> saved_;
  std::shared_ptr<void> probe_;
};

// f's outputs at `primals`, and its backward pass: cotangents for the outputs (an invalid
// Array: zero) to cotangents for the primals, then for `closure` (arrays f reads by handle,
// differentiated as if they were arguments); an invalid Array where none flows (int inputs).
// The backward pass runs under whatever tapes are active when it is called, so it can itself
// be differentiated (jvp is the transpose of a vjp).
struct Linearized {
  std::vector<Array> outputs;
  std::function<std::vector<Array>(const std::vector<Array>& cotangents)> backward;
};
Linearized vjp_leaves(const std::function<std::vector<Array>(const std::vector<Array>&)>& f,
                      const std::vector<Array>& primals, const std::vector<Array>& closure = {});
// Whether an op on x records a rule: a tape is active and x is floating (ints and bools carry no
// gradient, as in JAX).
inline bool differentiable(const Array& x) { return taping() && is_floating(x.dtype()); }

// Inside a rule during the backward pass: whether input k needs a cotangent (rules skip the
// work for inputs nobody differentiates, such as a matmul's data operand).
bool wants(size_t k);

// Sums a cotangent of `shape_after_broadcast` down to `shape` (numpy broadcasting's transpose).
Array unbroadcast(const Array& cotangent, const Shape& shape);

}  // namespace meshvk::detail
