#include "graph/analysis.hpp"

#include <algorithm>
#include <tuple>

namespace meshvk {

uint64_t CostAnalysis::bytes_communicated() const {
  uint64_t n = 0;
  for (const Communication& c : communication) n += c.bytes;
  return n;
}

uint64_t CostAnalysis::bytes_communicated(const std::vector<std::string>& axes) const {
  uint64_t n = 0;
  for (const Communication& c : communication)
    if (c.axes == axes) n += c.bytes;
  return n;
}

std::map<std::string, double> CostAnalysis::as_dict() const {
  return {{"flops", static_cast<double>(flops)},
          {"transcendentals", static_cast<double>(transcendentals)},
          {"bytes accessed", static_cast<double>(bytes_accessed)},
          {"bytes communicated", static_cast<double>(bytes_communicated())}};
}

namespace detail {

CostAnalysis cost_analysis_of(const std::map<int, kernels::OpCost>& counted, const std::set<int>& devices,
                              const std::vector<CollectiveRecord>& collectives) {
  CostAnalysis a;
  std::set<int> all = devices;
  for (const auto& kv : counted) all.insert(kv.first);
  for (const int d : all) {
    const kernels::OpCost c = counted.count(d) ? counted.at(d) : kernels::OpCost{};
    a.devices.push_back({d, c.flops, c.transcendentals, c.bytes});
    a.flops = std::max(a.flops, c.flops);
    a.transcendentals = std::max(a.transcendentals, c.transcendentals);
    a.bytes_accessed = std::max(a.bytes_accessed, c.bytes);
  }
  std::map<std::pair<std::vector<std::string>, std::string>, Communication> by;
  for (const CollectiveRecord& r : collectives) {
    Communication& c = by[{r.axes, r.kind}];
    c.axes = r.axes;
    c.kind = r.kind;
    c.count += r.times;
    c.bytes += r.bytes * r.times;
  }
  for (auto& kv : by) a.communication.push_back(std::move(kv.second));
  return a;
}

MemoryAnalysis memory_analysis_of(const Capture& capture, const std::vector<exec::ShardedValue>& inputs,
                                  const std::vector<exec::ShardedValue>& outputs, const std::set<int>& devices) {
  // Each buffer once, whatever number of values share it (a result that is an argument, one
  // value returned twice).
  std::set<const DeviceBuffer*> in, out, made(capture.allocated.begin(), capture.allocated.end()), counted;
  for (const auto& v : inputs)
    for (const auto& b : v.shards) in.insert(b.get());
  for (const auto& v : outputs)
    for (const auto& b : v.shards) out.insert(b.get());
  std::map<int, DeviceMemory> per;
  for (const int d : devices) per[d].device = d;
  auto at = [&](const DeviceBuffer* b) -> DeviceMemory& {
    DeviceMemory& m = per[b->device()];
    m.device = b->device();
    return m;
  };
  for (const DeviceBuffer* b : in) {
    DeviceMemory& m = at(b);
    m.argument_size_in_bytes += b->bytes();
    m.pool_bytes += b->capacity();
  }
  for (const DeviceBuffer* b : out) {
    DeviceMemory& m = at(b);
    m.output_size_in_bytes += b->bytes();
    if (in.count(b)) m.alias_size_in_bytes += b->bytes();
    else if (made.count(b)) m.pool_bytes += b->capacity();
  }
  for (const DeviceBuffer* b : made) {
    if (in.count(b) || out.count(b)) continue;
    DeviceMemory& m = at(b);
    m.temp_size_in_bytes += b->bytes();
    m.pool_bytes += b->capacity();
  }
  for (const auto& b : capture.buffers) {
    const DeviceBuffer* p = b.get();
    if (in.count(p) || out.count(p) || made.count(p)) continue;
    at(p).captured_size_in_bytes += p->bytes();
  }
  MemoryAnalysis a;
  for (auto& [device, m] : per) {
    m.peak_memory_in_bytes = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes;
    a.argument_size_in_bytes = std::max(a.argument_size_in_bytes, m.argument_size_in_bytes);
    a.output_size_in_bytes = std::max(a.output_size_in_bytes, m.output_size_in_bytes);
    a.alias_size_in_bytes = std::max(a.alias_size_in_bytes, m.alias_size_in_bytes);
    a.temp_size_in_bytes = std::max(a.temp_size_in_bytes, m.temp_size_in_bytes);
    a.peak_memory_in_bytes = std::max(a.peak_memory_in_bytes, m.peak_memory_in_bytes);
    a.pool_bytes = std::max(a.pool_bytes, m.pool_bytes);
    a.captured_size_in_bytes = std::max(a.captured_size_in_bytes, m.captured_size_in_bytes);
    a.devices.push_back(m);
  }
  return a;
}

}  // namespace detail
}  // namespace meshvk
