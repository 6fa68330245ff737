#pragma once
// A loop whose body is traced once and replayed on the device (exec/loop.hpp): the lax loops of
// graph/control_flow.cpp and lax.scan (graph/scan.cpp) run their bodies through it.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "exec/loop.hpp"
#include "exec/program.hpp"
#include "exec/program_log.hpp"
#include "graph/array_impl.hpp"
#include "graph/loop_support.hpp"
#include "graph/partial_sum.hpp"
#include "graph/saved_collectives.hpp"
#include "graph/tape.hpp"
#include "kernels/cost.hpp"
#include "meshvk/control_flow.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"

namespace meshvk::detail {

// A loop whose body ran once under a capture; next() runs one more iteration, on the device from
// the recording, or by calling the body again where the recording cannot be replayed (the body
// decided something on the host, or the runtime spans processes).
class TracedLoop {
 public:
  // `trace_only`: the traced iteration only records the body (its carry is replaced before the
  // first next()), so an enclosing program's replays leave it out and it counts for nothing.
  TracedLoop(const std::string& name, const LoopFn& body, const std::vector<Array>& init, bool trace_only = false)
      : name_(name), body_(body), rt_(Runtime::current().state()) {
    // The loop's collectives, in its body or taking the sums of its results, are not an
    // enclosing scan body's to save (saved_collectives.hpp): their results change under the
    // handles the trace made as the loop replays its recording. A scan body inside records its
    // own (counter_step).
    const CollectivesUnsaved unsaved;
    const uint64_t decided = host_decisions();
    std::vector<Array> owned;
    for (const Array& a : init) owned.push_back(copy(a));  // the loop's own input buffers
    std::vector<exec::ShardedValue> inputs;
    for (const Array& a : owned) inputs.push_back(materialized(a));
    auto capture = std::make_unique<Capture>();
    std::vector<Array> results;
    // Cost analysis: what the body's trace counts, the device runs again each iteration (next()).
    cost_ = kernels::CostRepeat();
    const exec::CollectiveMark collectives_from = exec::mark_collectives();
    rt_->begin_capture(capture.get());
    try {
      results = carried_like(owned, body_(owned));
      // A carry whose value comes to differ between devices along a mesh axis (a shard_map
      // body's axis_index) that it did not at the start: its values are right, but its gradient
      // would be summed over the axis too often or too little (the trace's types are the first
      // iteration's). JAX rejects such a loop outright; here only where a gradient is taken.
      for (size_t i = 0; taping() && i < owned.size() && i < results.size(); ++i) {
        std::vector<std::string> grown;
        for (const std::string& axis : results[i].impl()->varying)
          if (std::find(owned[i].impl()->varying.begin(), owned[i].impl()->varying.end(), axis) ==
              owned[i].impl()->varying.end())
            grown.push_back(axis);
        if (grown.empty()) continue;
        std::string axes;
        for (const std::string& a : grown) axes += (axes.empty() ? "'" : ", '") + a + "'";
        throw Error(name_ + ": carry " + std::to_string(i) + " (" + type_of(owned[i]) +
                    ") differs between devices along mesh axis " + axes +
                    " after an iteration but not at the start, so its gradient would be wrong (a loop's "
                    "carry keeps its type, as in JAX): start it varying with lax::pvary(init, {" + axes + "})");
      }
      // Results still partial (a layer's weight gradients over 'data') summed together: few
      // all-reduces per iteration, not one each.
      resolve_together(results);
      // Results that read the same arrays (a backward body's gradients): one kernel.
      materialize_together(results);
      // Every result in buffers of its own that the body wrote: a carry returned unchanged, or
      // one value returned twice, would be rewritten while read between iterations.
      std::vector<const DeviceBuffer*> seen;
      for (Array& r : results) {
        bool fresh = true;
        for (const auto& b : materialized(r).shards) {
          const Fence w = b->ready();
          fresh = fresh && !w.none() && w.value > capture->start_values[w.timeline] &&
                  std::find(seen.begin(), seen.end(), b.get()) == seen.end();
        }
        if (!fresh) r = copy(r);
        for (const auto& b : materialized(r).shards) seen.push_back(b.get());
      }
    } catch (...) {
      rt_->end_capture();
      abandon(std::move(capture));
      throw;
    }
    rt_->end_capture();
    cost_.end();
    collectives_ = exec::CollectiveRepeat(collectives_from, exec::mark_collectives());
    std::vector<exec::ShardedValue> outputs;
    for (const Array& r : results) {
      outputs.push_back(materialized(r));
      committed_.push_back(r.committed());
      varying_.push_back(r.impl()->varying);
    }
    unrolled_ = host_decisions() != decided || rt_->multi_process() || !capture->ring_uses.empty();
    if (trace_only && !unrolled_) leave_out_of_replays(*capture);
    loop_ = std::make_shared<exec::LoopBody>(rt_, std::move(capture), std::move(inputs), outputs, init.size());
    // Every enclosing capture recorded the traced iteration and will record the later ones (as
    // submissions it does not own): it keeps the body alive from now on, whenever this object
    // goes (a scan's backward loop may outlive the trace of the loop body it was built in).
    for (Capture* c : rt_->captures()) c->keep_alive.push_back(loop_);
    current_ = results;
  }

  ~TracedLoop() {
    // The recorded command buffers live as long as any program that submits them: every jit
    // trace this loop ran inside, or until the device has run them.
    const std::vector<Capture*> outer = rt_->captures();
    for (Capture* c : outer) c->keep_alive.push_back(loop_);
    if (outer.empty()) {
      std::vector<uint64_t> values;
      for (int t = 0; t < rt_->num_timelines(); ++t) values.push_back(rt_->last_submitted(t));
      rt_->keep_until(std::move(values), {loop_});
    }
  }
  TracedLoop(const TracedLoop&) = delete;
  TracedLoop& operator=(const TracedLoop&) = delete;

  // The current iteration's carry (the first init.size()) and outputs: valid until next().
  const std::vector<Array>& current() const { return current_; }

  void next() {
    const CollectivesUnsaved unsaved;  // as in the constructor
    if (unrolled_) {
      std::vector<Array> carry(current_.begin(), current_.begin() + carried_count());
      current_ = carried_like(carry, body_(carry));
      return;
    }
    loop_->iterate();
    // The replayed body did what its trace did: a jit trace's cost analysis counts it again
    // (except for the first iteration of a loop whose trace counted but is left out).
    if (uncounted_trace_) {
      uncounted_trace_ = false;
    } else {
      cost_.repeat();
      collectives_.repeat();
    }
    for (size_t i = 0; i < current_.size(); ++i)
      current_[i] = make_array(rt_, loop_->outputs()[i], committed_[i], varying_[i]);
  }
  size_t recorded() const { return loop_->recorded(); }
  bool unrolled() const { return unrolled_; }
  // From now on the body runs op by op (as unrolled_ loops do), so results take their inputs'
  // `varying` as the ops compute it, not what the trace saw.
  void unroll() { unrolled_ = true; }
  // The next iteration starts from `carry` instead of the current one.
  void restart_from(const std::vector<Array>& carry) {
    for (size_t i = 0; i < carry.size(); ++i) {
      const exec::RuleScope rule([&] { return name_ + ": the carry laid out as the loop's input"; });
      const Array placed = device_put(carry[i], current_[i].sharding());
      if (unrolled_) {
        current_[i] = placed;
        continue;
      }
      exec::overwrite(*rt_, loop_->outputs()[i], materialized(placed));
    }
  }

 private:
  size_t carried_count() const { return carried_; }

  // The body's results with each carry as its input was: the same shape and dtype (else an
  // Error), laid out alike.
  std::vector<Array> carried_like(const std::vector<Array>& carry, std::vector<Array> results) {
    carried_ = carry.size();
    // A scan's loop carries its index first: the user's carry leaves are numbered after it.
    const size_t hidden = name_.rfind("scan", 0) == 0 ? 1 : 0;
    auto leaf = [&](size_t i) { return std::to_string(i >= hidden ? i - hidden : i); };
    if (results.size() < carry.size())
      throw Error(name_ + ": the body returned " + std::to_string(results.size()) + " values for a carry of " +
                  std::to_string(carry.size()));
    for (size_t i = 0; i < carry.size(); ++i) {
      if (!results[i].valid()) throw Error(name_ + ": the body's carry leaf " + leaf(i) + " is an empty Array");
      if (results[i].shape() != carry[i].shape() || results[i].dtype() != carry[i].dtype())
        throw Error(name_ + ": the body's carry leaf " + leaf(i) + " (in flattening order) is " + type_of(results[i]) +
                    " but its input was " + type_of(carry[i]) +
                    "; a loop's carry must keep its shape and dtype from one iteration to the next");
      if (!results[i].sharding().is_equivalent_to(carry[i].sharding(), carry[i].ndim())) {
        const exec::RuleScope rule([&] { return name_ + ": the body's carry " + leaf(i) + " moved back to its input's layout"; });
        results[i] = device_put(results[i], carry[i].sharding());
        // Moved back to an uncommitted input's place: as free to move as that input was (a
        // carry that started on device 0 and met xs on a mesh must not pin the result there).
        if (!carry[i].committed())
          results[i] = make_array(rt_, materialized(results[i]), false, results[i].impl()->varying);
      }
    }
    for (size_t i = carry.size(); i < results.size(); ++i)
      if (!results[i].valid()) throw Error(name_ + ": the body returned an empty Array as output " + std::to_string(i - carry.size()));
    return results;
  }

  // Marks the traced iteration's submissions in every enclosing capture: see
  // Capture::Submission::trace_only.
  void leave_out_of_replays(const Capture& traced) {
    std::set<std::pair<int, uint64_t>> mine;
    for (const auto& s : traced.submissions) mine.insert({s.timeline, s.signal});
    for (Capture* outer : rt_->captures())
      for (auto& s : outer->submissions)
        if (mine.count({s.timeline, s.signal})) s.trace_only = true;
    uncounted_trace_ = !rt_->captures().empty();
  }

  // A body that threw while traced: inside a jit trace, the trace's program takes over what it
  // recorded (it submits those command buffers too, should the caller go on); else they are
  // waited for and freed.
  void abandon(std::unique_ptr<Capture> capture) {
    if (Capture* outer = rt_->capture()) {
      for (const auto& s : capture->submissions) {
        if (!s.owned || !s.cb) continue;
        for (auto& o : outer->submissions)
          if (o.cb == s.cb && o.timeline == s.timeline) o.owned = true;
      }
      for (auto& k : capture->keep_alive) outer->keep_alive.push_back(std::move(k));
      return;
    }
    exec::Program failed(rt_, std::move(capture), {}, {});  // waits for and frees what ran
  }

  std::string name_;
  LoopFn body_;
  std::shared_ptr<RuntimeState> rt_;
  kernels::CostRepeat cost_;
  exec::CollectiveRepeat collectives_{{}, {}};
  std::shared_ptr<exec::LoopBody> loop_;
  std::vector<Array> current_;
  std::vector<bool> committed_;
  std::vector<std::vector<std::string>> varying_;
  size_t carried_ = 0;
  bool unrolled_ = false;
  bool uncounted_trace_ = false;
};

}  // namespace meshvk::detail
