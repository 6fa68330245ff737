// lax.scan, fori_loop, while_loop and cond. A loop's body is traced once (its first
// iteration runs under a capture of its own, nested in any jit trace) and the device runs the
// recorded command buffers again for every further iteration (exec/loop.hpp): a 48-step scan is
// the program of one step. Reverse mode through scan is a scan of the body's vjp, run backwards
// over the carries the forward pass kept.
#include "exec/program_log.hpp"
#include "meshvk/control_flow.hpp"

#include <algorithm>
#include <climits>
#include <mutex>
#include <set>

#include "exec/loop.hpp"
#include "exec/program.hpp"
#include "graph/array_impl.hpp"
#include "graph/loop_support.hpp"
#include "graph/partial_sum.hpp"
#include "graph/saved_collectives.hpp"
#include "graph/tape.hpp"
#include "kernels/cost.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"

namespace meshvk::detail {

namespace {

thread_local uint64_t decisions = 0;

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
    const uint64_t decided = decisions;
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
    unrolled_ = decisions != decided || rt_->multi_process() || !capture->ring_uses.empty();
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

// Slice `at` (a one-element int32 index, within [0, n)) of each xs leaf along its leading axis: a
// take each, all reading one index, where a dynamic_slice per leaf computed its clamped start
// again (a kernel per leaf and iteration on every device).
std::vector<Array> leading_slices(const std::vector<Array>& xs, const Array& at) {
  std::vector<Array> out;
  for (const Array& leaf : xs) {
    const Shape rest(leaf.shape().begin() + 1, leaf.shape().end());
    out.push_back(reshape(take(leaf, at, 0, TakeMode::clip), rest));
  }
  return out;
}

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

namespace {

// The collectives' results a scan's forward loop saves for its backward pass
// (graph/saved_collectives.hpp): what the body's first call recorded. A later call that
// records other collectives (a body run again each iteration, between processes) makes them
// unusable: its values are zeros then, and the backward pass communicates again.
struct SavedCollectives {
  bool first = true;
  bool usable = true;
  std::vector<std::string> keys;
  std::vector<Array> like;
  size_t count() const { return usable ? keys.size() : 0; }
};

// A scan step as a loop body: the iteration index rides in the carry (first), so the recorded
// body slices xs itself. Returns the index, the carry, the ys and, with `residuals`, the carry
// the step began with and the results of the body's collectives (for the backward pass).
LoopFn counter_step(const ScanBody& body, const std::vector<Array>& xs, size_t nc, bool reverse, bool residuals,
                    std::shared_ptr<size_t> ny, std::shared_ptr<SavedCollectives> saved = nullptr) {
  return [body, xs, nc, reverse, residuals, ny, saved](const std::vector<Array>& c) {
    // The iteration's index, clamped as dynamic_slice clamps a start (scan's index stays within);
    // a scan of one iteration takes each leaf whole.
    std::vector<Array> x;
    if (!xs.empty() && xs.front().shape()[0] == 1)
      for (const Array& leaf : xs) x.push_back(reshape(leaf, Shape(leaf.shape().begin() + 1, leaf.shape().end())));
    else if (!xs.empty())
      x = leading_slices(xs, reshape(minimum(maximum(c[0], 0), static_cast<int32_t>(xs.front().shape()[0] - 1)),
                                     Shape{1}));
    const std::vector<Array> user(c.begin() + 1, c.end());
    std::optional<CollectiveRecorder> recorder;
    if (saved) recorder.emplace();
    auto [carry, y] = body(user, x);
    std::vector<Array> results;
    if (saved) {
      results = recorder->values();
      const std::vector<std::string> keys = recorder->keys();
      recorder.reset();
      if (saved->first) {
        saved->first = false;
        saved->keys = keys;
        saved->like = results;
      } else if (keys != saved->keys) {
        saved->usable = false;
      }
      if (!saved->usable) {
        results.clear();
        for (const Array& l : saved->like) results.push_back(zeros_like(l));
      }
    }
    if (carry.size() != nc)
      throw Error("scan: the body returned a carry of " + std::to_string(carry.size()) + " arrays for one of " +
                  std::to_string(nc) + "; the carry keeps its structure");
    *ny = y.size();
    std::vector<Array> out{c[0] + (reverse ? -1 : 1)};
    out.insert(out.end(), carry.begin(), carry.end());
    out.insert(out.end(), y.begin(), y.end());
    if (residuals) out.insert(out.end(), user.begin(), user.end());
    out.insert(out.end(), results.begin(), results.end());
    return out;
  };
}

// The step counter, where the xs are: replicated on the mesh (or the device) of the first
// committed one. On device 0 it would mix committed devices with xs on a mesh where the body
// runs again each iteration (between processes: "take: operands are committed to different
// devices"); there the counter the body returns is committed.
Array first_index(int64_t n, bool reverse, const std::vector<Array>& xs) {
  const Array i = scalar(static_cast<int32_t>(reverse ? n - 1 : 0));
  for (const Array& x : xs) {
    if (!x.committed()) continue;
    if (const NamedSharding* named = x.sharding().named()) return device_put(i, NamedSharding(named->mesh(), P()));
    return device_put(i, x.sharding());
  }
  return i;
}

// Each iteration's outputs, copied (the loop rewrites them), stacked along a new leading axis in
// index order.
struct Stacker {
  std::vector<std::vector<Array>> steps;
  void keep(const std::vector<Array>& outs) {
    std::vector<Array> kept;
    for (const Array& o : outs) kept.push_back(copy(o));
    steps.push_back(std::move(kept));
  }
  Array stacked(size_t j, bool reverse) const {
    std::vector<Array> pieces;
    for (const auto& s : steps) pieces.push_back(s[j]);
    if (reverse) std::reverse(pieces.begin(), pieces.end());
    return stack(pieces, 0);
  }
};

// Scan's backward pass, traced while the forward pass runs (the body may refer to values that
// are gone by the time the gradient is taken, as a lambda capturing a caller's locals by
// reference does): a loop over the body's vjp, the other way, with the cotangents of the ys in
// buffers of its own that the backward pass fills before it runs the loop. That trace runs the
// body once on zero cotangents; a jit program's replays leave it out (trace_only), so the
// device runs the backward body n times, not n + 1.
struct ScanBackward {
  std::unique_ptr<TracedLoop> loop;
  std::vector<Array> ct_ys;  // the loop reads these buffers
  int64_t n = 0;
  bool reverse = false;
};

// A scan whose backward pass will itself be differentiated (jvp transposes the vjp; a gradient
// of a gradient differentiates it in the primals) runs unrolled on the active tapes, op by op:
// the traced backward loop is replayed from a recording no tape sees, and building a
// differentiable one later would call the body after the function that made the scan has
// returned (its lambdas may capture that function's locals by reference). Trace time and a jit
// program's size grow with the length then, the values are the unrolled loop's.
ScanLeaves unrolled_scan(const ScanBody& body, const std::vector<Array>& init, const std::vector<Array>& xs, int64_t n,
                         bool reverse) {
  std::vector<Array> carry = init;
  std::vector<std::vector<Array>> ys(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = reverse ? n - 1 - t : t;
    std::vector<Array> x;
    for (const Array& leaf : xs) x.push_back(leaf[i]);
    auto [next, y] = body(carry, x);
    if (next.size() != init.size())
      throw Error("scan: the body returned a carry of " + std::to_string(next.size()) + " arrays for one of " +
                  std::to_string(init.size()) + "; the carry keeps its structure");
    for (size_t k = 0; k < next.size(); ++k) {
      if (!next[k].valid() || next[k].shape() != init[k].shape() || next[k].dtype() != init[k].dtype())
        throw Error("scan: the body's carry leaf " + std::to_string(k) + " is " +
                    (next[k].valid() ? type_of(next[k]) : std::string("an empty Array")) + " for a carry of " +
                    type_of(init[k]) + "; the carry keeps its shapes and dtypes");
      // Laid out as its input was, as the traced loop's carry is (TracedLoop::carried_like), by
      // device_put, which the tapes differentiate. An uncommitted input (made on the default
      // device) has no layout to keep: the carry stays where the body put it (re-wrapping it
      // as uncommitted, as the traced loop does, would cut it from the tapes).
      if (init[k].committed() && !next[k].sharding().is_equivalent_to(init[k].sharding(), init[k].ndim())) {
        const exec::RuleScope rule([&] { return "scan: the body's carry " + std::to_string(k) + " moved back to its input's layout"; });
        next[k] = device_put(next[k], init[k].sharding());
      }
    }
    const std::vector<Array>* other = t == 0 ? nullptr : &ys[static_cast<size_t>(reverse ? i + 1 : i - 1)];
    for (size_t j = 0; j < y.size(); ++j)
      if (!y[j].valid() || (other && j < other->size() &&
                            (y[j].shape() != (*other)[j].shape() || y[j].dtype() != (*other)[j].dtype())))
        throw Error("scan: the body's output " + std::to_string(j) + " is " +
                    (y[j].valid() ? type_of(y[j]) : std::string("an empty Array")) +
                    (other && j < other->size() ? " after " + type_of((*other)[j]) + " in another iteration" : std::string()) +
                    "; every iteration returns outputs of the same shapes and dtypes");
    if (other && y.size() != other->size())
      throw Error("scan: the body returned " + std::to_string(y.size()) + " outputs, another iteration " +
                  std::to_string(other->size()));
    carry = std::move(next);
    ys[static_cast<size_t>(i)] = std::move(y);
  }
  ScanLeaves out;
  out.carry = std::move(carry);
  for (size_t j = 0; j < ys.front().size(); ++j) {
    std::vector<Array> pieces;
    for (const auto& step : ys) pieces.push_back(step[j]);
    out.ys.push_back(stack(pieces, 0));
  }
  return out;
}

}  // namespace

ScanLeaves scan_leaves(const ScanBody& body, const std::vector<Array>& init, const std::vector<Array>& xs,
                       std::optional<int64_t> length, bool reverse) {
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid()) throw Error("scan: xs leaf " + std::to_string(i) + " is an empty Array");
    if (xs[i].ndim() == 0)
      throw Error("scan: xs leaf " + std::to_string(i) + " is a scalar; scan slices each xs along its leading axis");
    if (length && xs[i].shape()[0] != *length)
      throw Error("scan: xs leaf " + std::to_string(i) + " is " + type_of(xs[i]) + " but length is " +
                  std::to_string(*length) + "; every xs needs length along its leading axis");
    if (!length) length = xs[i].shape()[0];
  }
  for (size_t i = 0; i < init.size(); ++i)
    if (!init[i].valid()) throw Error("scan: carry leaf " + std::to_string(i) + " is an empty Array");
  if (!length) throw Error("scan: no xs and no length; give xs to scan over or the number of iterations");
  const int64_t n = *length;
  if (n < 0) throw Error("scan: length " + std::to_string(n) + " is negative");
  if (n > INT32_MAX) throw Error("scan: length " + std::to_string(n) + " is past int32, the index's dtype");
  auto rt = Runtime::current().state();
  std::lock_guard lock(rt->mutex());
  if (n > 0 && backward_differentiated()) return unrolled_scan(body, init, xs, n, reverse);
  ScanLeaves out;
  if (n == 0) {
    // No iteration: the ys' shapes come from running the body once on zeros, as JAX traces it.
    const TapeIsolation isolated(init);
    std::vector<Array> x;
    for (const Array& leaf : xs) x.push_back(zeros(Shape(leaf.shape().begin() + 1, leaf.shape().end()), leaf.dtype()));
    auto [carry, y] = body(init, x);
    out.carry = init;
    for (const Array& leaf : y) {
      Shape s{0};
      s.insert(s.end(), leaf.shape().begin(), leaf.shape().end());
      out.ys.push_back(zeros(s, leaf.dtype()));
    }
    return out;
  }

  // The tapes record one rule for the whole loop: the body runs with them suspended, and what it
  // reads that they track (besides carry and xs) is differentiated as an input too.
  std::vector<Array> own = init;
  own.insert(own.end(), xs.begin(), xs.end());
  std::optional<TapeIsolation> isolated(std::in_place, own);
  const bool residuals = isolated->was_taping();
  const size_t nc = init.size(), nx = xs.size();
  auto ny = std::make_shared<size_t>(0);
  std::vector<Array> start{first_index(n, reverse, xs)};
  start.insert(start.end(), init.begin(), init.end());
  Stacker steps;
  const auto saved = residuals ? std::make_shared<SavedCollectives>() : nullptr;
  const LoopResult loop = run_loop("scan", counter_step(body, xs, nc, reverse, residuals, ny, saved), start, n,
                                   [&](int64_t, const std::vector<Array>& outs) { steps.keep(outs); });
  out.recorded = loop.recorded;
  out.carry.assign(loop.carry.begin() + 1, loop.carry.end());
  for (size_t j = 0; j < *ny; ++j) out.ys.push_back(steps.stacked(j, reverse));
  if (!residuals) return out;
  const std::vector<Array> closure = isolated->closure();

  // The backward loop's carry: the index, the carry's cotangent, the closure's sums; its xs: each
  // step's carry and x, and the cotangents of its ys.
  auto backward = std::make_shared<ScanBackward>();
  backward->n = n;
  backward->reverse = !reverse;
  std::vector<Array> bxs;
  for (size_t j = 0; j < nc; ++j) bxs.push_back(steps.stacked(*ny + j, reverse));
  bxs.insert(bxs.end(), xs.begin(), xs.end());
  for (const Array& y : out.ys) {
    backward->ct_ys.push_back(copy(zeros_like(y)));
    bxs.push_back(backward->ct_ys.back());
  }
  // Each iteration's collective results, for the backward pass's run of the body's forward pass.
  const size_t nr = saved ? saved->count() : 0;
  for (size_t r = 0; r < nr; ++r) bxs.push_back(steps.stacked(*ny + nc + r, reverse));
  const size_t ncl = closure.size(), nyy = *ny;
  const ScanBody step_vjp = [body, closure, init, nc, nx, ncl, nyy, saved](const std::vector<Array>& c,
                                                                          const std::vector<Array>& x) {
    const std::vector<Array> primals(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(nc + nx));
    const std::vector<Array> results(x.begin() + static_cast<std::ptrdiff_t>(nc + nx + nyy), x.end());
    const Linearized lin = vjp_leaves(
        [&](const std::vector<Array>& p) {
          std::optional<CollectiveReplay> replay;
          if (!results.empty()) replay.emplace(saved->keys, results);
          auto [carry, y] = body(std::vector<Array>(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(nc)),
                                 std::vector<Array>(p.begin() + static_cast<std::ptrdiff_t>(nc), p.end()));
          replay.reset();
          carry.insert(carry.end(), y.begin(), y.end());
          return carry;
        },
        primals, closure);
    std::vector<Array> seeds(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(nc));
    seeds.insert(seeds.end(), x.begin() + static_cast<std::ptrdiff_t>(nc + nx),
                 x.begin() + static_cast<std::ptrdiff_t>(nc + nx + nyy));
    const std::vector<Array> g = lin.backward(seeds);
    std::vector<Array> carry, y;
    for (size_t i = 0; i < nc; ++i) carry.push_back(g[i].valid() ? g[i] : zeros_like(init[i]));
    for (size_t j = 0; j < ncl; ++j)
      carry.push_back(g[nc + nx + j].valid() ? c[nc + j] + g[nc + nx + j] : c[nc + j]);
    for (size_t i = 0; i < nx; ++i) y.push_back(g[nc + i].valid() ? g[nc + i] : zeros_like(x[nc + i]));
    return std::make_pair(carry, y);
  };
  std::vector<Array> bstart{first_index(n, !reverse, bxs)};
  for (const Array& c : init) bstart.push_back(zeros_like(c));
  for (const Array& c : closure) bstart.push_back(zeros_like(c));
  backward->loop = std::make_unique<TracedLoop>(
      "scan (backward)", counter_step(step_vjp, bxs, nc + ncl, !reverse, false, std::make_shared<size_t>(0)), bstart,
      /*trace_only=*/true);

  isolated.reset();  // the rule goes on the caller's tapes
  std::vector<Array> inputs = init;
  inputs.insert(inputs.end(), xs.begin(), xs.end());
  inputs.insert(inputs.end(), closure.begin(), closure.end());
  std::vector<Array> outputs = out.carry;
  outputs.insert(outputs.end(), out.ys.begin(), out.ys.end());
  on_tape(outputs, inputs, [backward, init, xs, closure, nc, nx, nyy](const std::vector<Array>& cts) {
    for (const Array& ct : cts)
      // A probe tracks values computed from what its function closes over (the cotangent of
      // a scan nested in another scan's body, squared: 2 * last * ct): that is no transform.
      if (tracked_by_a_transform(ct))
        throw Error("scan: its backward pass is being differentiated (a jvp, or a gradient of its gradient) by a "
                    "transform that was not active when the scan ran (a vjp's function called under grad); "
                    "apply that transform to the function that runs the scan (jvp, grad of grad), which "
                    "then unrolls it");
    auto rt = Runtime::current().state();
    std::lock_guard lock(rt->mutex());
    TracedLoop& loop = *backward->loop;
    // Inside a shard_map, cotangents that vary over a manual axis the placeholders the loop was
    // traced with did not (the loss reads each device's own data after the scan) make the
    // gradients vary too; the trace's results would still say they do not, and shard_map would
    // then skip their psum. The placeholders take the cotangents' axes and the loop runs op by op.
    bool widened = false;
    for (size_t j = 0; j < nyy; ++j) {
      const Array& placeholder = backward->ct_ys[j];
      if (!placeholder.valid() || !cts[nc + j].valid()) continue;
      const std::vector<std::string> axes = varying_of({&placeholder, &cts[nc + j]});
      widened = widened || axes.size() != placeholder.impl()->varying.size();
      placeholder.impl()->varying = axes;
    }
    for (size_t i = 0; i < nc && i + 1 < loop.current().size(); ++i) {
      const Array& traced = loop.current()[1 + i];
      if (traced.valid() && cts[i].valid())
        widened = widened || varying_of({&traced, &cts[i]}).size() != traced.impl()->varying.size();
    }
    if (widened) loop.unroll();
    for (size_t j = 0; j < nyy; ++j)
      exec::overwrite(*rt, materialized(backward->ct_ys[j]),
                      materialized(device_put(cts[nc + j], backward->ct_ys[j].sharding())));
    std::vector<Array> from{first_index(backward->n, backward->reverse, {})};  // placed as the loop's
    for (size_t i = 0; i < nc; ++i) from.push_back(is_floating(init[i].dtype()) ? cts[i] : zeros_like(init[i]));
    for (const Array& c : closure) from.push_back(zeros_like(c));
    loop.restart_from(from);
    Stacker steps;
    for (int64_t k = 0; k < backward->n; ++k) {
      loop.next();
      steps.keep(std::vector<Array>(loop.current().begin() + static_cast<std::ptrdiff_t>(from.size()), loop.current().end()));
    }
    const std::vector<Array>& carry = loop.current();
    std::vector<Array> grads;
    for (size_t i = 0; i < nc; ++i) grads.push_back(is_floating(init[i].dtype()) ? copy(carry[1 + i]) : Array());
    for (size_t i = 0; i < nx; ++i)
      grads.push_back(is_floating(xs[i].dtype()) ? steps.stacked(i, backward->reverse) : Array());
    for (size_t j = 0; j < closure.size(); ++j) grads.push_back(copy(carry[1 + nc + j]));
    return grads;
  });
  return out;
}

std::vector<Array> cond_leaves(const Array& pred, const std::function<std::vector<Array>()>& on_true,
                               const std::function<std::vector<Array>()>& on_false) {
  if (!pred.valid()) throw Error("cond: the predicate is an empty Array");
  if (pred.size() != 1) throw Error("cond: the predicate must be a scalar, got " + type_of(pred));
  auto& rt = *pred.impl()->runtime;
  if (!rt.capture()) return read_predicate(pred, "cond") ? on_true() : on_false();
  // Inside a trace the program must serve every later call: both branches run and each result
  // is selected on the device (what JAX does with cond under vmap).
  const std::vector<Array> t = on_true(), f = on_false();
  if (t.size() != f.size())
    throw Error("cond: the branches return " + std::to_string(t.size()) + " and " + std::to_string(f.size()) +
                " arrays; both must return the same structure");
  const Array p = pred.dtype() == DType::bool_ ? reshape(pred, {}) : reshape(pred != 0, {});
  std::vector<Array> out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].shape() != f[i].shape() || t[i].dtype() != f[i].dtype())
      throw Error("cond: output " + std::to_string(i) + " is " + type_of(t[i]) + " in the true branch and " +
                  type_of(f[i]) + " in the false one; both branches must return the same types");
    out.push_back(where(p, t[i], f[i]));
  }
  return out;
}

}  // namespace meshvk::detail
