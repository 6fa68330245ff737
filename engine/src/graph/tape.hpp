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
bool taping();
// Whether an op on x records a rule: a tape is active and x is floating (ints and bools carry no
// gradient, as in JAX).
inline bool differentiable(const Array& x) { return taping() && is_floating(x.dtype()); }

// Inside a rule during the backward pass: whether input k needs a cotangent (rules skip the
// work for inputs nobody differentiates, such as a matmul's data operand).
bool wants(size_t k);

// Sums a cotangent of `shape_after_broadcast` down to `shape` (numpy broadcasting's transpose).
Array unbroadcast(const Array& cotangent, const Shape& shape);

}  // namespace meshvk::detail
