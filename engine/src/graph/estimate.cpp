// Lowered::estimate: the recorded program replayed on a hardware description. Each submission
// starts when what it waits for has finished and its engine is free (a device's compute engine,
// or its collective engine where the hardware has one), and lasts its roofline time.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "meshvk/error.hpp"
#include "meshvk/estimate.hpp"
#include "meshvk/jit.hpp"

namespace meshvk {

namespace {

bool is_matmul(const ProgramGraph::Work& w) { return !w.collective && w.kind == "matmul"; }

// A gather-like pass along one axis of n devices, each contributing `shard` bytes: the scaling
// book's model. A bidirectional ring with wraparound needs n/2 steps, one without (a line)
// n - 1, each moving one shard over every link; through a switch (NVLink) every device sends the
// others' n - 1 shards at its own bandwidth, one hop.
double gather_pass(const Link& l, int n, double shard) {
  if (n <= 1 || l.bandwidth <= 0) return 0;
  if (l.topology == "all_to_all") return (n - 1) * shard / l.bandwidth + l.latency;
  const int steps = l.bidirectional && l.wraparound ? n / 2 : n - 1;
  return steps * (shard / l.bandwidth + l.latency);
}

std::string axes_text(const std::vector<std::string>& axes) {
  std::string s;
  for (const auto& a : axes) s += (s.empty() ? "" : ",") + a;
  return s;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(s < 1e-3 ? 1 : 3);
  if (s < 1e-3) o << s * 1e6 << " us";
  else o << s * 1e3 << " ms";
  return o.str();
}

}  // namespace

double collective_time(const ProgramGraph::Work& c, const Hardware& hw) {
  const double bytes = static_cast<double>(c.collective_bytes);
  if (c.kind.empty() || bytes <= 0) return 0;
  std::vector<std::pair<const Link*, int>> axes;
  for (size_t i = 0; i < c.axes.size(); ++i)
    axes.emplace_back(&hw.link_for(c.axes[i]), i < c.axis_sizes.size() ? c.axis_sizes[i] : 1);
  if (axes.empty()) axes.emplace_back(&hw.link, 1);
  int n = 1;
  for (const auto& [l, size] : axes) n *= size;
  double t = 0;
  if (c.kind == "all-gather") {
    // bytes: the local shard; it grows by each axis's size as the axes are gathered in turn.
    double shard = bytes;
    for (const auto& [l, size] : axes) {
      t += gather_pass(*l, size, shard);
      shard *= size;
    }
  } else if (c.kind == "reduce-scatter" || c.kind == "all-reduce") {
    // bytes: (n - 1) / n of the operand for a reduce-scatter, all of it for an all-reduce. A
    // reduce-scatter costs an all-gather of its result; an all-reduce is one of each.
    double whole = c.kind == "all-reduce" || n <= 1 ? bytes : bytes * n / (n - 1);
    for (const auto& [l, size] : axes) {
      t += gather_pass(*l, size, whole / size);
      whole /= size;
    }
    if (c.kind == "all-reduce") t *= 2;
  } else if (c.kind == "all-to-all") {
    // A quarter of an all-gather of the operand on a bidirectional torus (the scaling book's
    // V / (4 W)); through a switch, the (n - 1) / n each device sends.
    const double operand = n <= 1 ? bytes : bytes * n / (n - 1);
    for (const auto& [l, size] : axes)
      t += l->topology == "all_to_all" ? gather_pass(*l, size, operand / size) : gather_pass(*l, size, operand) / 4;
  } else {
    // collective-permute, collective-broadcast, reshard: every device sends `bytes` at once,
    // over one link; the farthest pair of a line (a ring shift's wraparound step) is n - 1 hops.
    const Link* slowest = axes.front().first;
    int hops = 1;
    for (const auto& [l, size] : axes) {
      if (l->bandwidth < slowest->bandwidth) slowest = l;
      if (l->topology == "ring" && !l->wraparound) hops = std::max(hops, size - 1);
    }
    t = bytes / slowest->bandwidth + hops * slowest->latency;
  }
  return t / hw.efficiency_of("collective");
}

Estimate estimate(const ProgramGraph& g, const Hardware& hw) {
  const size_t count = g.nodes.size();
  // A graph made by hand (the function is public) is checked: its work ids name entries of
  // g.work. Waits on later nodes are not edges (a recorded program waits only on earlier ones),
  // so the critical path cannot loop.
  for (size_t i = 0; i < count; ++i)
    for (const uint32_t w : g.nodes[i].work)
      if (w >= g.work.size())
        throw Error("estimate: node " + std::to_string(i) + " names work " + std::to_string(w) + " of " +
                    std::to_string(g.work.size()) + "; work ids index ProgramGraph::work");
  // Which node signals each (timeline, value): a wait's producer.
  std::map<std::pair<int, uint64_t>, size_t> signaller;
  for (size_t i = 0; i < count; ++i) signaller[{g.nodes[i].timeline, g.nodes[i].value}] = i;
  auto producer = [&](const std::pair<int, uint64_t>& w) -> std::optional<size_t> {
    const auto it = signaller.find(w);
    if (it == signaller.end()) return std::nullopt;  // before the program: ready at 0
    return it->second;
  };

  // Per node: its collective (the first collective work with a kind), or its kernels' totals.
  struct Load {
    const ProgramGraph::Work* collective = nullptr;
    double flops = 0, vector_flops = 0, bytes = 0, kernels = 0;
    DType dtype = DType::float32;
    std::string name;
    bool fused = false;
  };
  std::vector<Load> load(count);
  for (size_t i = 0; i < count; ++i) {
    Load& l = load[i];
    for (const uint32_t w : g.nodes[i].work) {
      const auto& work = g.work[w];
      if (work.collective && !work.kind.empty()) {
        l.collective = &work;
        break;
      }
    }
    if (l.collective) {
      l.name = l.collective->kind + " over " + axes_text(l.collective->axes);
      continue;
    }
    for (const uint32_t w : g.nodes[i].work) {
      const auto& work = g.work[w];
      if (work.collective) continue;
      l.kernels += 1;
      const double eff = hw.efficiency_of(work.kind);
      if (is_matmul(work)) {
        l.flops += work.flops / eff;
        l.dtype = work.dtype;
      } else {
        l.vector_flops += (work.flops + work.transcendentals) / eff;
      }
      l.bytes += work.bytes / hw.efficiency_of(is_matmul(work) ? "copy" : work.kind);
      if (l.name.empty() || is_matmul(work)) l.name = work.kind;
    }
  }

  // XLA's fusions into a matmul: a slice or elementwise op read only by matmuls of its device,
  // and an elementwise op reading a matmul's result, run inside that matmul; their bytes join its
  // roofline.
  if (hw.fuse_into_matmul) {
    std::vector<std::vector<size_t>> consumers(count);
    for (size_t i = 0; i < count; ++i)
      for (const auto& w : g.nodes[i].waits)
        if (const auto p = producer(w); p && *p != i) consumers[*p].push_back(i);
    auto matmul_node = [&](size_t i) { return !load[i].collective && load[i].name == "matmul"; };
    for (size_t i = 0; i < count; ++i) {
      Load& l = load[i];
      if (l.collective || l.kernels == 0 || matmul_node(i) || l.name == "reduce") continue;
      const int device = g.nodes[i].device;
      // Operand fusion: every reader a matmul on this device.
      bool feeds = !consumers[i].empty();
      for (const size_t c : consumers[i]) feeds = feeds && matmul_node(c) && g.nodes[c].device == device;
      if (feeds) {
        load[consumers[i].front()].bytes += l.bytes;
        l.fused = true;
        continue;
      }
      // Output fusion: an elementwise op reading a matmul's result.
      if (l.name != "elementwise") continue;
      for (const auto& w : g.nodes[i].waits)
        if (const auto p = producer(w); p && matmul_node(*p) && g.nodes[*p].device == device) {
          load[*p].bytes += l.bytes;
          l.fused = true;
          break;
        }
    }
  }

  // The replay: each node after its waits' producers and its engine's previous node.
  std::vector<double> start(count, 0), end(count, 0);
  std::vector<std::optional<size_t>> because(count);  // what it waited for last: the critical edge
  std::map<std::pair<int, int>, std::pair<double, std::optional<size_t>>> engine;  // (device, 0 compute | 1 collectives)
  std::map<int, uint32_t> last_collective;  // per device: the collective its last node ran
  Estimate est;
  est.hardware = hw.name;
  for (size_t i = 0; i < count; ++i) {
    const auto& node = g.nodes[i];
    const Load& l = load[i];
    double ready = 0;
    for (const auto& w : node.waits)
      if (const auto p = producer(w); p && *p < i && end[*p] >= ready) {
        ready = end[*p];
        because[i] = *p;
      }
    const bool comm = l.collective != nullptr;
    const auto key = std::make_pair(hw.shared_engine ? 0 : node.device, comm && hw.collective_dma ? 1 : 0);
    auto& [free, previous] = engine[key];
    double duration = 0;
    if (comm) {
      // A collective's submissions on one device in a row are one run of it: charged once.
      const auto id = static_cast<uint32_t>(l.collective - g.work.data()) + 1;
      if (last_collective[node.device] != id) duration = collective_time(*l.collective, hw);
      last_collective[node.device] = id;
    } else {
      last_collective[node.device] = 0;
      if (!l.fused && l.kernels > 0) {
        const double matrix = hw.matmul_flops(l.dtype), vector = hw.vector_flops > 0 ? hw.vector_flops : hw.matmul_flops(DType::float32);
        const double compute = (matrix > 0 ? l.flops / matrix : 0) + (vector > 0 ? l.vector_flops / vector : 0);
        duration = std::max(compute, l.bytes / hw.hbm_bandwidth) + l.kernels * hw.dispatch;
      }
    }
    if (duration > 0 && free > ready) {
      ready = free;
      because[i] = previous;
    }
    start[i] = ready;
    end[i] = ready + duration;
    if (duration > 0) {
      free = end[i];
      previous = i;
      est.timeline.push_back({node.device, l.name, comm, start[i], end[i]});
    }
    est.step_time = std::max(est.step_time, end[i]);
  }

  // The critical path: back from the node that ends last along what each waited for.
  if (count) {
    size_t last = 0;
    for (size_t i = 0; i < count; ++i)
      if (end[i] > end[last]) last = i;
    for (std::optional<size_t> at = last; at; at = because[*at])
      if (end[*at] > start[*at])
        est.critical_path.push_back({g.nodes[*at].device, load[*at].name, load[*at].collective != nullptr, start[*at], end[*at]});
    std::reverse(est.critical_path.begin(), est.critical_path.end());
  }

  // Shares per device: compute and communication time, and the time nothing ran.
  std::map<int, std::vector<std::pair<double, double>>> busy;
  std::map<int, DeviceProjection> per_device;
  for (const auto& n : g.nodes) per_device[n.device].device = n.device;
  for (const ProjectedSpan& s : est.timeline) {
    (s.communication ? per_device[s.device].communication : per_device[s.device].compute) += s.end - s.start;
    busy[s.device].emplace_back(s.start, s.end);
  }
  for (auto& [d, p] : per_device) {
    auto& spans = busy[d];
    std::sort(spans.begin(), spans.end());
    double covered = 0, reach = 0;
    for (const auto& [a, b] : spans) {
      if (b <= reach) continue;
      covered += b - std::max(a, reach);
      reach = b;
    }
    p.idle = std::max(0.0, est.step_time - covered);
    est.devices.push_back(p);
  }
  return est;
}

Hardware calibrate(Hardware hw, const Lowered& program, double measured, const std::string& kind) {
  auto at = [&](double e) {
    hw.efficiency[kind] = e;
    return program.estimate(hw).step_time;
  };
  const double fastest = at(1.0);
  if (!(measured >= fastest))
    throw Error("calibrate: " + seconds_text(measured) + " measured is faster than " + seconds_text(fastest) +
                " projected at the peak of " + hw.name + "; give a measured time >= that");
  // The step time falls as the efficiency rises: bisect on its logarithm.
  double lo = 1e-6, hi = 1.0;
  if (at(lo) < measured)
    throw Error("calibrate: " + kind + " ops barely move the projected step of this program on " + hw.name +
                "; calibrate an op kind that is on its critical path");
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);
    (at(mid) > measured ? lo : hi) = mid;
  }
  hw.efficiency[kind] = hi;
  return hw;
}

std::string Estimate::to_string() const {
  std::ostringstream o;
  o << "projected step on " << hardware << ": " << seconds_text(step_time) << "\n";
  o << "  device   compute   communication   idle\n";
  for (const auto& d : devices) {
    auto share = [&](double s) {
      std::ostringstream p;
      p << std::fixed << std::setprecision(0) << (step_time > 0 ? 100 * s / step_time : 0) << "%";
      return p.str();
    };
    o << "  " << std::setw(6) << d.device << "   " << std::setw(7) << share(d.compute) << "   " << std::setw(13)
      << share(d.communication) << "   " << std::setw(4) << share(d.idle) << "\n";
  }
  o << "  critical path (" << critical_path.size() << " steps):\n";
  // Consecutive steps of one name on one device as one line.
  for (size_t i = 0; i < critical_path.size();) {
    size_t j = i;
    double total = 0;
    while (j < critical_path.size() && critical_path[j].name == critical_path[i].name &&
           critical_path[j].device == critical_path[i].device) {
      total += critical_path[j].end - critical_path[j].start;
      ++j;
    }
    o << "    device " << critical_path[i].device << ": " << critical_path[i].name;
    if (j - i > 1) o << " x" << (j - i);
    o << "  " << seconds_text(total) << " (from " << seconds_text(critical_path[i].start) << ")\n";
    i = j;
  }
  return o.str();
}

std::string Estimate::to_chrome_trace() const {
  std::ostringstream o;
  o << std::setprecision(12) << "{\"traceEvents\":[";
  bool first = true;
  for (const ProjectedSpan& s : timeline) {
    o << (first ? "" : ",") << "{\"name\":" << json_string(s.name) << ",\"ph\":\"X\",\"pid\":" << s.device
      << ",\"tid\":" << (s.communication ? 1 : 0) << ",\"ts\":" << s.start * 1e6 << ",\"dur\":" << (s.end - s.start) * 1e6
      << ",\"cat\":\"" << (s.communication ? "communication" : "compute") << "\"}";
    first = false;
  }
  o << "],\"otherData\":{\"projected_on\":" << json_string(hardware) << ",\"step_time_us\":" << step_time * 1e6 << "}}";
  return o.str();
}

}  // namespace meshvk
