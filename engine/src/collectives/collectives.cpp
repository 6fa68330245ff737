#include "collectives/collectives.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "collectives/peer_reduce.hpp"
#include "collectives/transport.hpp"
#include "kernels/cost.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/launch.hpp"
#include "kernels/storage16.hpp"
#include "meshvk/error.hpp"
#include "profile/hooks.hpp"

namespace meshvk::collectives {

using detail::DeviceBuffer;
using detail::Fence;
using detail::Recording;
using detail::RuntimeState;

namespace {

constexpr uint64_t kOneShotLimit = 256 << 10;

// Elements are `es` bytes: 4, or 2 for bfloat16 and float16 (moved, never reduced, as such).
std::shared_ptr<DeviceBuffer> allocate_like(RuntimeState& rt, const DeviceBuffer& member, uint64_t count,
                                            uint64_t es = 4) {
  return rt.allocate(member.device(), count * es);
}

// Submits a recording and records who read and who wrote what.
void finish(RuntimeState& rt, Recording&& rec, const std::vector<const DeviceBuffer*>& read,
            const std::vector<DeviceBuffer*>& written) {
  const Fence f = rt.submit(std::move(rec));
  for (const DeviceBuffer* b : read) const_cast<DeviceBuffer*>(b)->used_by(f);
  for (DeviceBuffer* b : written) b->written_by(f);
}

// A step of member `rec.device` whose work all happened as its bytes arrived from another
// process (ProcessTransport's receive recordings): `rec` holds only waits, the last on the
// device's receive timeline implying the rest (each receive waited for what wrote what it reads
// and writes). `written` is then ready with that receive, and no empty submission goes to the
// queue (on lavapipe a round trip through its queue thread per ring step). False, with nothing
// done, where `rec` waits on no receive.
bool finish_on_arrival(RuntimeState& rt, Recording& rec, DeviceBuffer& written) {
  if (!rt.multi_process()) return false;
  const int receive = rt.peer_receive_timeline(rec.device);
  Fence last{};
  for (const Fence& f : rec.waits)
    if (f.timeline == receive && f.value > last.value) last = f;
  if (last.none()) return false;
  rt.discard(std::move(rec));
  written.written_by(last);
  return true;
}

// A member's step moves from its copies to the kernel that consumes them: where the device has a
// transfer stream, the copies are submitted there and a compute recording waiting for them is
// begun; else the step goes on in the same recording.
Recording then_compute(RuntimeState& rt, Recording&& copies,
                       const std::vector<const DeviceBuffer*>& read,
                       const std::vector<DeviceBuffer*>& written) {
  if (copies.timeline == copies.device) return std::move(copies);
  const int device = copies.device;
  // What the copies filled is read by the kernels: it lives until they finish, not the copies.
  std::vector<std::shared_ptr<const void>> kept = copies.keep_alive;
  const Fence f = rt.submit(std::move(copies));
  for (const DeviceBuffer* b : read) const_cast<DeviceBuffer*>(b)->used_by(f);
  for (DeviceBuffer* b : written) b->written_by(f);
  Recording rec = rt.begin(device);
  rec.wait_for(f);
  rec.keep_alive = std::move(kept);
  return rec;
}

// Names the collective in profiles and in the errors of waits that time out.
class Step {
 public:
  Step(const char* name, const char* activity, const char* algorithm = nullptr)
      : profiled_(name, algorithm), activity_(activity) {}

 private:
  const profile::CollectiveScope profiled_;  // profile hook
  const detail::ActivityScope activity_;
};

// Names one step of a ring phase within the current collective ("all_reduce(ring), reduce-scatter
// step 2 of 7"), so a wait that times out between processes says where the ring stopped.
class RingStep {
 public:
  RingStep(const char* phase, int step, int steps)
      : scope_(detail::intern_activity(
            std::string(detail::current_activity() ? detail::current_activity() : "collective") +
            ", " + phase + " step " + std::to_string(step + 1) + " of " + std::to_string(steps))) {}

 private:
  const detail::ActivityScope scope_;
};

void copy(RuntimeState& rt, Recording& rec, const DeviceBuffer& src, uint64_t src_elem,
          const DeviceBuffer& dst, uint64_t dst_elem, uint64_t count, uint64_t es = 4) {
  transport_between(rt, src.device(), dst.device()).copy(rt, rec, src, src_elem * es, dst, dst_elem * es, count * es);
}

kernels::EwOp reduction_op(Reduction op) {
  return op == Reduction::sum ? kernels::EwOp::add : op == Reduction::max ? kernels::EwOp::maximum : kernels::EwOp::minimum;
}

// A program folding k inputs in order: op(op(in0, in1), in2) ...
kernels::EwProgram fold_program(int k, DType dtype, Reduction op) {
  kernels::EwProgram p;
  for (int i = 0; i < k; ++i) {
    kernels::EwNode n{kernels::EwOp::input, dtype};
    n.input = i;
    p.nodes.push_back(n);
  }
  int acc = 0;
  for (int i = 1; i < k; ++i) {
    kernels::EwNode n{reduction_op(op), dtype};
    n.a = acc;
    n.b = i;
    p.nodes.push_back(n);
    acc = static_cast<int>(p.nodes.size() - 1);
  }
  if (k == 1) {  // a lone input still needs an operation to store
    kernels::EwNode n{kernels::EwOp::maximum, dtype};
    n.a = 0;
    n.b = 0;
    p.nodes.push_back(n);
  }
  p.num_inputs = k;
  return p;
}

// out[out_start..] = fold(inputs[i][starts[i]..]) over `count` elements.
void record_fold(RuntimeState& rt, Recording& rec, const std::vector<const DeviceBuffer*>& inputs,
                 const std::vector<uint64_t>& starts, uint64_t count, DType dtype, Reduction op,
                 const DeviceBuffer& out, uint64_t out_start) {
  const kernels::UncountedScope uncounted;  // the collective's own sums: communication, not the program's flops
  if (record_rank_fold(rt, rec, inputs, starts, count, dtype, op, out, out_start)) return;
  kernels::barrier(rec.cb);
  // bfloat16 / float16 are folded here as float32 words (all_reduce widened them): read and
  // written as float32, each step rounded to the format as the nodes' dtype says.
  const DType words = is_16bit(dtype) ? DType::float32 : dtype;
  std::vector<kernels::EwInput> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    kernels::EwInput e;
    e.buffer = inputs[i];
    e.dtype = words;
    e.start = starts[i];
    in.push_back(e);
  }
  kernels::EwProgram program = fold_program(static_cast<int>(inputs.size()), dtype, op);
  if (words != dtype) {
    for (kernels::EwNode& node : program.nodes)
      if (node.op == kernels::EwOp::input) node.dtype = words;
    kernels::EwNode stored{kernels::EwOp::cast, words};
    stored.a = static_cast<int>(program.nodes.size() - 1);
    program.nodes.push_back(stored);
  }
  kernels::record_elementwise(rt, rec, program, in, Shape{static_cast<int64_t>(count)}, out, out_start);
  kernels::barrier(rec.cb);
}

// Chunk boundaries for splitting `count` elements n ways, aligned to 64 elements so every chunk
// starts where a vector load may.
std::vector<uint64_t> chunk_bounds(uint64_t count, int n) {
  std::vector<uint64_t> b(n + 1);
  for (int c = 0; c <= n; ++c) b[c] = c == n ? count : (count * c / n) / 64 * 64;
  return b;
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// Ring reduce-scatter over `acc` (each member's running reduction, modified in place): after
// n-1 steps member r holds the full reduction of chunk r. At step s member r adds chunk
// r-s-2 received from member r-1, which finished that chunk at its step s-1. The chunk it adds
// to is always still its input's (member r writes chunk r-s-2 only at step s), so it is read
// from `in`, and so is what member r-1 sends at step 0: `acc` needs no copy of the inputs first.
void ring_reduce_scatter(RuntimeState& rt, const Buffers& in, const Buffers& acc,
                         const std::vector<uint64_t>& bounds, DType dtype, Reduction op) {
  const int n = static_cast<int>(acc.size());
  for (int s = 0; s < n - 1; ++s) {
    const RingStep named("reduce-scatter", s, n - 1);
    std::vector<Recording> steps;
    Buffers received(n);
    for (int r = 0; r < n; ++r) {
      const int p = mod(r - 1, n), c = mod(r - s - 2, n);
      const uint64_t lo = bounds[c], len = bounds[c + 1] - bounds[c];
      Recording rec = rt.begin_transfer(acc[r]->device());
      const DeviceBuffer& sent = s == 0 ? *in[p] : *acc[p];
      // A tier that folds where the bytes arrive (between processes: out of the ring) leaves
      // received[r] empty; the others copy into it for the fold below.
      if (!transport_between(rt, sent.device(), acc[r]->device())
               .fold_into(rt, rec, sent, lo, *in[r], lo, *acc[r], lo, len, dtype, op,
                          /*src_first=*/false, /*src_rewritten=*/s > 0)) {
        received[r] = allocate_like(rt, *acc[r], std::max<uint64_t>(len, 1));
        copy(rt, rec, sent, lo, *received[r], 0, len);
      }
      steps.push_back(std::move(rec));
    }
    // Every member's copies are recorded (and waits fixed) before any step is submitted, so each
    // reads its predecessor's previous step rather than this one.
    for (int r = 0; r < n; ++r) {
      const DeviceBuffer* sent = s == 0 ? in[mod(r - 1, n)].get() : acc[mod(r - 1, n)].get();
      if (received[r])
        steps[r] = then_compute(rt, std::move(steps[r]), {sent}, {received[r].get()});
    }
    for (int r = 0; r < n; ++r) {
      const int c = mod(r - s - 2, n);
      const uint64_t lo = bounds[c], len = bounds[c + 1] - bounds[c];
      Recording& rec = steps[r];
      rec.wait_for(acc[r]->ready());
      rec.wait_for(in[r]->ready());
      const DeviceBuffer* sent = s == 0 ? in[mod(r - 1, n)].get() : acc[mod(r - 1, n)].get();
      if (!received[r]) {  // folded on arrival: this step only waits for it
        if (!finish_on_arrival(rt, rec, *acc[r]))
          finish(rt, std::move(rec), {sent, in[r].get()}, {acc[r].get()});
        continue;
      }
      if (len)
        record_fold(rt, rec, {in[r].get(), received[r].get()}, {lo, 0}, len, dtype, op, *acc[r],
                    lo);
      rec.keep_alive.push_back(received[r]);
      finish(rt, std::move(rec), {sent, received[r].get(), in[r].get()}, {acc[r].get()});
    }
  }
}

// A ring of two members in two processes whose bytes go staged (between nodes), up to
// kPairLimit, in one phase: each member folds the other's whole input as it arrives, instead of
// folding one chunk and then fetching the other. The same bytes cross the link (each member's
// whole input one way), but nothing waits for a phase to end. Chunk c is folded as the ring
// folds it, in[c] then in[1-c], so the bits are the ring's on both members. False where it does
// not apply. Measured with 2 processes, 2026-11-27 (busbw): 1 MiB between two simulated nodes
// 0.50-0.62 -> 0.63-0.71 GB/s; larger inputs were slower so (4 MiB 0.60 -> 0.50, 16 MiB 0.65 ->
// 0.55: each member folds twice the bytes, and the folds' CPU competes with the sockets), and so
// was 1 MiB on one node (2.4-2.6 -> 1.5-1.7 GB/s: there the fold is the limit, not the link).
// Folding the ring's chunks in parts of 4 MiB, each handed on once folded, measured no different.
constexpr uint64_t kPairLimit = 1ull << 20;

bool pair_all_reduce(RuntimeState& rt, const Buffers& in, const Buffers& acc,
                     const std::vector<uint64_t>& bounds, DType dtype, Reduction op) {
  if (in.size() != 2 || bounds[2] * 4 > kPairLimit ||
      rt.process_of(in[0]->device()) == rt.process_of(in[1]->device()) ||
      rt.between_processes() != RuntimeState::BetweenProcesses::staged ||
      !fold_kernel_supports(dtype))
    return false;
  std::vector<Recording> steps;
  for (int r = 0; r < 2; ++r) {
    Recording rec = rt.begin_transfer(acc[r]->device());
    Transport& link = transport_between(rt, in[1 - r]->device(), acc[r]->device());
    for (int c = 0; c < 2; ++c) {
      const uint64_t lo = bounds[c], len = bounds[c + 1] - bounds[c];
      if (!link.fold_into(rt, rec, *in[1 - r], lo, *in[r], lo, *acc[r], lo, len, dtype, op,
                          /*src_first=*/c != r))
        throw Error("internal: the transport between processes did not fold");
    }
    steps.push_back(std::move(rec));
  }
  for (int r = 0; r < 2; ++r) {
    steps[r].wait_for(acc[r]->ready());
    steps[r].wait_for(in[r]->ready());
    finish(rt, std::move(steps[r]), {in[1 - r].get(), in[r].get()}, {acc[r].get()});
  }
  return true;
}

// Ring all-gather in place: member r starts owning chunk r; at step s it copies chunk r-s-1 from
// member r-1. Where member r's chunk r came from `owned[r]` (its whole content), step 0 copies
// from there instead: the same bytes, without waiting for member r-1 to have placed them.
void ring_all_gather(RuntimeState& rt, const Buffers& out, const std::vector<uint64_t>& bounds,
                     uint64_t es = 4, const Buffers* owned = nullptr) {
  const int n = static_cast<int>(out.size());
  for (int s = 0; s < n - 1; ++s) {
    const RingStep named("all-gather", s, n - 1);
    std::vector<Recording> steps;
    std::vector<const DeviceBuffer*> sources;
    for (int r = 0; r < n; ++r) {
      const int p = mod(r - 1, n), c = mod(r - s - 1, n);
      const bool first = s == 0 && owned;
      const DeviceBuffer& from = first ? *(*owned)[p] : *out[p];
      Recording rec = rt.begin_transfer(out[r]->device());
      rec.wait_for(out[r]->ready());
      copy(rt, rec, from, first ? 0 : bounds[c], *out[r], bounds[c], bounds[c + 1] - bounds[c], es);
      steps.push_back(std::move(rec));
      sources.push_back(&from);
    }
    for (int r = 0; r < n; ++r) {
      const bool arrived = rt.process_of(sources[r]->device()) != rt.process_of(out[r]->device());
      if (!arrived || !finish_on_arrival(rt, steps[r], *out[r]))
        finish(rt, std::move(steps[r]), {sources[r]}, {out[r].get()});
    }
  }
}

Buffers copies_of(RuntimeState& rt, const Buffers& in, uint64_t count, uint64_t es = 4) {
  Buffers out;
  for (const auto& b : in) {
    auto c = allocate_like(rt, *b, count, es);
    Recording rec = rt.begin_transfer(b->device());
    copy(rt, rec, *b, 0, *c, 0, count, es);
    finish(rt, std::move(rec), {b.get()}, {c.get()});
    out.push_back(std::move(c));
  }
  return out;
}

// Each member's `count` 16-bit elements as float32 words (a fresh buffer on its device), or back.
Buffers converted(RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype, bool widen) {
  Buffers out;
  for (const auto& b : in) {
    Recording rec = rt.begin(b->device());
    rec.wait_for(b->ready());
    std::shared_ptr<DeviceBuffer> c;
    if (widen) {
      c = kernels::record_widen(rt, rec, *b, dtype, 0, count);
    } else {
      c = allocate_like(rt, *b, count, dtype_size(dtype));
      kernels::record_narrow(rt, rec, *b, 0, dtype, count, *c, 0);
    }
    finish(rt, std::move(rec), {b.get()}, {c.get()});
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Algorithm choose_algorithm(uint64_t bytes) {
  if (const auto forced = collective_choice_from_env().algorithm) return *forced;
  return bytes < kOneShotLimit ? Algorithm::one_shot : Algorithm::ring;
}

const char* algorithm_name(Algorithm a) { return a == Algorithm::one_shot ? "one_shot" : "ring"; }

Buffers all_reduce(RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype, Reduction op, Algorithm algorithm) {
  const int n = static_cast<int>(in.size());
  if (n == 1 || count == 0) return copies_of(rt, in, count, dtype_size(dtype));
  if (is_16bit(dtype))
    return converted(rt, all_reduce(rt, converted(rt, in, count, dtype, true), count, dtype, op, algorithm), count,
                     dtype, false);
  if (algorithm == Algorithm::ring && count >= static_cast<uint64_t>(64 * n)) {
    const Step step("all_reduce", "all_reduce(ring)", "ring");
    const auto bounds = chunk_bounds(count, n);
    if (auto peer = peer_ring_all_reduce(rt, in, bounds, dtype, op)) return *peer;  // peer-read tier
    Buffers acc;
    for (const auto& b : in) acc.push_back(allocate_like(rt, *b, count));
    if (pair_all_reduce(rt, in, acc, bounds, dtype, op)) return acc;
    // Reduce-scatter leaves chunk r complete on member r; the all-gather then spreads it.
    ring_reduce_scatter(rt, in, acc, bounds, dtype, op);
    ring_all_gather(rt, acc, bounds);
    return acc;
  }
  // One-shot: every member copies all peers' inputs and folds them in rank order.
  const Step step("all_reduce", "all_reduce(one_shot)", "one_shot");
  if (auto peer = peer_one_shot_all_reduce(rt, in, count, dtype, op)) return *peer;  // peer-read tier
  Buffers out;
  for (int r = 0; r < n; ++r) {
    auto result = allocate_like(rt, *in[r], count);
    Recording rec = rt.begin_transfer(in[r]->device());
    std::vector<const DeviceBuffer*> inputs, read;
    std::vector<DeviceBuffer*> peers;
    for (int q = 0; q < n; ++q) {
      if (q == r) {
        inputs.push_back(in[r].get());
      } else {
        auto peer = allocate_like(rt, *in[r], count);
        copy(rt, rec, *in[q], 0, *peer, 0, count);
        rec.keep_alive.push_back(peer);
        inputs.push_back(peer.get());
        peers.push_back(peer.get());
      }
      read.push_back(in[q].get());
    }
    rec = then_compute(rt, std::move(rec), read, peers);
    rec.wait_for(in[r]->ready());
    // The fold kernel takes at most 16 inputs; larger groups fold in stages.
    while (inputs.size() > 16) {
      auto partial = allocate_like(rt, *in[r], count);
      std::vector<const DeviceBuffer*> head(inputs.begin(), inputs.begin() + 16);
      record_fold(rt, rec, head, std::vector<uint64_t>(16, 0), count, dtype, op, *partial, 0);
      rec.keep_alive.push_back(partial);
      inputs.erase(inputs.begin(), inputs.begin() + 16);
      inputs.insert(inputs.begin(), partial.get());
    }
    record_fold(rt, rec, inputs, std::vector<uint64_t>(inputs.size(), 0), count, dtype, op, *result, 0);
    read.insert(read.end(), peers.begin(), peers.end());  // the kernels read them too
    finish(rt, std::move(rec), read, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

Buffers reduce_scatter(RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype, Reduction op,
                       Algorithm algorithm) {
  const int n = static_cast<int>(in.size());
  const uint64_t count = chunk * n;
  if (is_16bit(dtype))
    return converted(rt, reduce_scatter(rt, converted(rt, in, count, dtype, true), chunk, dtype, op, algorithm),
                     chunk, dtype, false);
  Buffers out;
  if (algorithm == Algorithm::ring && n > 1 && chunk % 64 == 0 && chunk > 0) {
    const Step step("reduce_scatter", "reduce_scatter(ring)", "ring");
    if (auto peer = peer_ring_reduce_scatter(rt, in, chunk, dtype, op)) return *peer;  // peer-read tier
    Buffers acc;
    for (const auto& b : in) acc.push_back(allocate_like(rt, *b, count));
    std::vector<uint64_t> bounds(n + 1);
    for (int c = 0; c <= n; ++c) bounds[c] = c * chunk;
    ring_reduce_scatter(rt, in, acc, bounds, dtype, op);
    for (int r = 0; r < n; ++r) {
      auto result = allocate_like(rt, *acc[r], chunk);
      Recording rec = rt.begin_transfer(acc[r]->device());
      copy(rt, rec, *acc[r], r * chunk, *result, 0, chunk);
      finish(rt, std::move(rec), {acc[r].get()}, {result.get()});
      out.push_back(std::move(result));
    }
    return out;
  }
  // One-shot: member r copies chunk r of every peer and folds them in rank order.
  const Step step("reduce_scatter", "reduce_scatter(one_shot)", "one_shot");
  if (n > 1)
    if (auto peer = peer_one_shot_reduce_scatter(rt, in, chunk, dtype, op)) return *peer;  // peer-read tier
  for (int r = 0; r < n; ++r) {
    auto result = allocate_like(rt, *in[r], chunk);
    Recording rec = rt.begin_transfer(in[r]->device());
    std::vector<const DeviceBuffer*> inputs, read;
    std::vector<DeviceBuffer*> pieces;
    std::vector<uint64_t> starts;
    for (int q = 0; q < n; ++q) {
      auto piece = allocate_like(rt, *in[r], std::max<uint64_t>(chunk, 1));
      copy(rt, rec, *in[q], r * chunk, *piece, 0, chunk);
      rec.keep_alive.push_back(piece);
      inputs.push_back(piece.get());
      pieces.push_back(piece.get());
      starts.push_back(0);
      read.push_back(in[q].get());
    }
    rec = then_compute(rt, std::move(rec), read, pieces);
    if (chunk) {
      while (inputs.size() > 16) {
        auto partial = allocate_like(rt, *in[r], chunk);
        std::vector<const DeviceBuffer*> head(inputs.begin(), inputs.begin() + 16);
        record_fold(rt, rec, head, std::vector<uint64_t>(16, 0), chunk, dtype, op, *partial, 0);
        rec.keep_alive.push_back(partial);
        inputs.erase(inputs.begin(), inputs.begin() + 16);
        inputs.insert(inputs.begin(), partial.get());
      }
      record_fold(rt, rec, inputs, std::vector<uint64_t>(inputs.size(), 0), chunk, dtype, op, *result, 0);
    }
    read.insert(read.end(), pieces.begin(), pieces.end());  // the kernels read them too
    finish(rt, std::move(rec), read, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

Buffers all_gather(RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype, Algorithm algorithm) {
  const int n = static_cast<int>(in.size());
  const uint64_t es = dtype_size(dtype);
  Buffers out;
  if (algorithm == Algorithm::ring && n > 1 && chunk % 64 == 0) {
    const Step step("all_gather", "all_gather(ring)", "ring");
    for (int r = 0; r < n; ++r) {
      auto result = allocate_like(rt, *in[r], chunk * n, es);
      Recording rec = rt.begin_transfer(in[r]->device());
      copy(rt, rec, *in[r], 0, *result, r * chunk, chunk, es);
      finish(rt, std::move(rec), {in[r].get()}, {result.get()});
      out.push_back(std::move(result));
    }
    std::vector<uint64_t> bounds(n + 1);
    for (int c = 0; c <= n; ++c) bounds[c] = c * chunk;
    ring_all_gather(rt, out, bounds, es, &in);
    return out;
  }
  const Step step("all_gather", "all_gather(one_shot)", "one_shot");
  for (int r = 0; r < n; ++r) {
    auto result = allocate_like(rt, *in[r], chunk * n, es);
    Recording rec = rt.begin_transfer(in[r]->device());
    std::vector<const DeviceBuffer*> read;
    for (int q = 0; q < n; ++q) {
      copy(rt, rec, *in[q], 0, *result, q * chunk, chunk, es);
      read.push_back(in[q].get());
    }
    finish(rt, std::move(rec), read, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

Buffers all_to_all(RuntimeState& rt, const Buffers& in, uint64_t chunk, DType dtype) {
  const Step step("all_to_all", "all_to_all");
  const int n = static_cast<int>(in.size());
  const uint64_t es = dtype_size(dtype);
  Buffers out;
  for (int r = 0; r < n; ++r) {
    auto result = allocate_like(rt, *in[r], chunk * n, es);
    Recording rec = rt.begin_transfer(in[r]->device());
    std::vector<const DeviceBuffer*> read;
    for (int q = 0; q < n; ++q) {
      copy(rt, rec, *in[q], r * chunk, *result, q * chunk, chunk, es);
      read.push_back(in[q].get());
    }
    finish(rt, std::move(rec), read, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

Buffers permute(RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype,
                const std::vector<std::pair<int, int>>& pairs) {
  const Step step("ppermute", "ppermute");
  const int n = static_cast<int>(in.size());
  const uint64_t es = dtype_size(dtype);
  std::vector<int> source(n, -1);
  for (const auto& [src, dst] : pairs) source[dst] = src;
  Buffers out;
  for (int r = 0; r < n; ++r) {
    auto result = allocate_like(rt, *in[r], count, es);
    Recording rec = rt.begin_transfer(in[r]->device());
    std::vector<const DeviceBuffer*> read;
    if (source[r] < 0) {
      // Whole words (fills take multiples of 4 bytes): the capacity holds a half-used last one.
      if (count && rec.cb) vkCmdFillBuffer(rec.cb, result->vk_buffer(), result->offset(), (count * es + 3) / 4 * 4, 0);
    } else {
      copy(rt, rec, *in[source[r]], 0, *result, 0, count, es);
      read.push_back(in[source[r]].get());
    }
    finish(rt, std::move(rec), read, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

Buffers broadcast(RuntimeState& rt, const Buffers& in, uint64_t count, DType dtype, int source) {
  const Step step("broadcast", "broadcast");
  const uint64_t es = dtype_size(dtype);
  Buffers out;
  for (size_t r = 0; r < in.size(); ++r) {
    auto result = allocate_like(rt, *in[r], count, es);
    Recording rec = rt.begin_transfer(in[r]->device());
    copy(rt, rec, *in[source], 0, *result, 0, count, es);
    finish(rt, std::move(rec), {in[source].get()}, {result.get()});
    out.push_back(std::move(result));
  }
  return out;
}

}  // namespace meshvk::collectives
