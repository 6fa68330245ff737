#pragma once
// What the loops (graph/control_flow.cpp, scan.cpp, traced_loop.hpp) share with jit: a count
// of the host decisions a trace made (a while_loop's predicate read on the host), after which its
// program cannot be replayed as recorded, and a read of a device scalar that a trace may make.
#include <cstdint>

#include "meshvk/array.hpp"

namespace meshvk::detail {

// This thread's host decisions so far: a trace that made one is traced again at each call.
uint64_t host_decisions();
void note_host_decision();
// x's value on the host, also while a jit or loop trace runs (the decision is noted).
bool read_predicate(const Array& x, const char* op);

}  // namespace meshvk::detail
