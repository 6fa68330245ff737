#pragma once
// Lowered::cost_analysis() and memory_analysis() of a traced program (graph/jit.cpp).
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "exec/sharded_value.hpp"
#include "kernels/cost.hpp"
#include "meshvk/jit.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::detail {

// What the trace's CostLog counted on each of `devices`, with the program's collectives.
CostAnalysis cost_analysis_of(const std::map<int, kernels::OpCost>& counted, const std::set<int>& devices,
                              const std::vector<CollectiveRecord>& collectives);

// The program's buffers on each of `devices`: its inputs, its outputs, what its capture
// allocated, and what else the capture reads (arrays from outside).
MemoryAnalysis memory_analysis_of(const Capture& capture, const std::vector<exec::ShardedValue>& inputs,
                                  const std::vector<exec::ShardedValue>& outputs, const std::set<int>& devices);

// The capture's submissions as Lowered::estimate replays them, with the trace's cost events.
std::shared_ptr<const ProgramGraph> program_graph_of(const RuntimeState& rt, const Capture& capture,
                                                     const std::vector<kernels::CostEvent>& events);

// Keeps the last 256 traces' graphs for meshvk::traced_programs().
void remember_traced(const std::string& name, std::shared_ptr<const ProgramGraph> graph);

}  // namespace meshvk::detail
