// fori_loop, while_loop and cond (lax.scan: graph/scan.cpp). A loop's body is traced once (its
// first iteration runs under a capture of its own, nested in any jit trace) and the device runs
// the recorded command buffers again for every further iteration (graph/traced_loop.hpp,
// exec/loop.hpp): a 48-step loop is the program of one step.
#include "meshvk/control_flow.hpp"

#include <string>
#include <vector>

#include "graph/loop_support.hpp"
#include "graph/tape.hpp"
#include "graph/traced_loop.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk::detail {

namespace {

thread_local uint64_t decisions = 0;

}  // namespace

void carry_structure_error(const char* op, const std::string& given, const std::string& returned) {
  throw Error(std::string(op) + ": the body returned a carry of structure " + returned + " for one of " + given +
              " (A: an Array, [..]: a vector, (..): a pair or tuple, {..}: Params, N: nullopt); a carry keeps its structure");
}

uint64_t host_decisions() { return decisions; }
void note_host_decision() { ++decisions; }

bool read_predicate(const Array& x, const char* op) {
  if (!x.valid()) throw Error(std::string(op) + ": the predicate is an empty Array");
  if (x.size() != 1)
    throw Error(std::string(op) + ": the predicate must be a scalar, got " + type_of(x));
  const Array b = x.dtype() == DType::bool_ ? x : (x != 0);
  int32_t v = 0;
  auto& rt = *b.impl()->runtime;
  std::lock_guard lock(rt.mutex());
  if (rt.capture()) note_host_decision();
  exec::download(rt, materialized(b), &v);
  return v != 0;
}

LoopResult run_loop(const std::string& name, const LoopFn& body, const std::vector<Array>& init,
                    int64_t iterations, const std::function<void(int64_t, const std::vector<Array>&)>& each) {
  auto rt = Runtime::current().state();
  std::lock_guard lock(rt->mutex());
  LoopResult result{init, 0, false};
  if (iterations <= 0) return result;
  TracedLoop loop(name, body, init);
  for (int64_t k = 0; k < iterations; ++k) {
    if (k) loop.next();
    if (each) each(k, std::vector<Array>(loop.current().begin() + init.size(), loop.current().end()));
  }
  result.carry.assign(loop.current().begin(), loop.current().begin() + init.size());
  result.recorded = loop.recorded();
  result.unrolled = loop.unrolled();
  return result;
}

std::vector<Array> while_leaves(const std::function<Array(const std::vector<Array>&)>& cond, const LoopFn& body,
                                const std::vector<Array>& init) {
  for (size_t i = 0; i < init.size(); ++i)
    if (!init[i].valid()) throw Error("while_loop: carry leaf " + std::to_string(i) + " is an empty Array");
  auto rt = Runtime::current().state();
  std::lock_guard lock(rt->mutex());
  auto untracked = [](const std::vector<Array>& values) {
    for (const Array& a : values)
      if (tracked(a))
        throw Error("while_loop: reverse-mode differentiation of a while_loop is not supported (nor in JAX: "
                    "its trip count is data); use lax::fori_loop with host bounds or lax::scan");
  };
  untracked(init);
  const TapeIsolation isolated(init);
  if (!read_predicate(cond(init), "while_loop")) return init;
  TracedLoop loop("while_loop", body, init);
  untracked(isolated.closure());
  for (;;) {
    std::vector<Array> carry(loop.current().begin(), loop.current().begin() + init.size());
    if (!read_predicate(cond(carry), "while_loop")) return carry;
    loop.next();
  }
}

}  // namespace meshvk::detail
