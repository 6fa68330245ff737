#pragma once
// "Project onto": a program's projected timeline on real hardware (meshvk::Estimate) drawn as
// lanes beside the measured ones, one pair per device (compute, communication).
#include <cstdint>
#include <string>

#include <meshvk/estimate.hpp>

#include "trace_model.hpp"

namespace inspector {

// Projected lanes carry a runtime id at or below this (measured ones are >= 0), so the timeline
// can put each device's projection right under its measured lanes.
constexpr int kProjectedRuntime = -1000;
inline bool is_projected(const TraceLane& lane) { return lane.runtime <= kProjectedRuntime; }

// Where `program`'s measured run starts in `trace`: its first span's start, else the trace's.
int64_t program_start(const TraceData& trace, const std::string& program);

// Adds `e`'s spans to `trace` on lanes "projected on <hardware>: <program> · device d ·
// compute|communication", from `start_ns`, then finishes the trace. Returns the spans added.
size_t add_projection(TraceData& trace, const meshvk::Estimate& e, const std::string& program, int64_t start_ns);

}  // namespace inspector
