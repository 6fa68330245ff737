// Lowered::graph(): a jit trace's captured submissions with what each one runs, and
// Lowered::estimate() over it (meshvk/estimate.hpp).
#include <algorithm>
#include <deque>
#include <mutex>

#include "graph/analysis.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

namespace {

const char* kind_name(kernels::OpKind k) {
  switch (k) {
    case kernels::OpKind::matmul: return "matmul";
    case kernels::OpKind::elementwise: return "elementwise";
    case kernels::OpKind::reduce: return "reduce";
    case kernels::OpKind::copy: return "copy";
    case kernels::OpKind::collective: return "collective";
  }
  return "copy";
}

}  // namespace

std::shared_ptr<const ProgramGraph> program_graph_of(const RuntimeState& rt, const Capture& capture,
                                                     const std::vector<kernels::CostEvent>& events) {
  auto g = std::make_shared<ProgramGraph>();
  for (const kernels::CostEvent& e : events) {
    ProgramGraph::Work w;
    w.collective = e.kind == kernels::OpKind::collective;
    w.kind = w.collective ? e.collective : kind_name(e.kind);
    w.device = e.device;
    w.flops = e.cost.flops;
    w.transcendentals = e.cost.transcendentals;
    w.bytes = e.cost.bytes;
    w.dtype = e.dtype;
    w.axes = e.axes;
    w.axis_sizes = e.axis_sizes;
    w.collective_bytes = e.bytes;
    g->work.push_back(std::move(w));
  }
  for (const Capture::Submission& s : capture.submissions) {
    // Left out of every replay (a loop body traced only to be recorded).
    if (s.trace_only) continue;
    ProgramGraph::Node n;
    n.timeline = s.timeline;
    n.device = rt.device_of(s.timeline);
    n.value = s.signal;
    for (const Fence& f : s.waits)
      if (!f.none() && std::find(s.replica_waits.begin(), s.replica_waits.end(), f) == s.replica_waits.end())
        n.waits.emplace_back(f.timeline, f.value);
    for (const uint32_t id : s.work)
      if (id >= 1 && id <= g->work.size()) n.work.push_back(id - 1);
    if (s.activity) n.activity = s.activity;
    g->nodes.push_back(std::move(n));
  }
  return g;
}

namespace {
std::mutex traced_mutex;
std::deque<TracedProgram>& traced() {
  static std::deque<TracedProgram> programs;
  return programs;
}
}  // namespace

void remember_traced(const std::string& name, std::shared_ptr<const ProgramGraph> graph) {
  std::lock_guard lock(traced_mutex);
  traced().push_back({name, std::move(graph)});
  if (traced().size() > 256) traced().pop_front();
}

}  // namespace meshvk::detail

namespace meshvk {

std::vector<TracedProgram> traced_programs() {
  std::lock_guard lock(detail::traced_mutex);
  return {detail::traced().begin(), detail::traced().end()};
}

const ProgramGraph& Lowered::graph() const {
  static const ProgramGraph empty;
  return graph_ ? *graph_ : empty;
}

Estimate Lowered::estimate(const Hardware& hardware) const {
  if (!graph_)
    throw Error("Lowered::estimate: this Lowered has no recorded program; use jit(f).lower(args)");
  return meshvk::estimate(*graph_, hardware);
}

}  // namespace meshvk
