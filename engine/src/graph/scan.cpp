// lax.scan: a loop whose step slices xs by an index it carries, traced once and replayed
// (graph/traced_loop.hpp); reverse mode is a scan of the body's vjp, run backwards over the
// carries the forward pass kept.
#include <algorithm>
#include <climits>
#include <mutex>
#include <set>

#include "graph/tape.hpp"
#include "graph/traced_loop.hpp"

namespace meshvk::detail {

namespace {

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
  // Outside a trace one branch runs, unless the predicate differs between devices (a shard_map
  // body's axis_index): then, as in a trace, both run and each device selects its own.
  if (!rt.capture() && pred.impl()->varying.empty()) return read_predicate(pred, "cond") ? on_true() : on_false();
  const Array p = pred.dtype() == DType::bool_ ? reshape(pred, {}) : reshape(pred != 0, {});
  const auto check = [](const std::vector<Array>& t, const std::vector<Array>& f) {
    if (t.size() != f.size())
      throw Error("cond: the branches return " + std::to_string(t.size()) + " and " + std::to_string(f.size()) +
                  " arrays; both must return the same structure");
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].shape() != f[i].shape() || t[i].dtype() != f[i].dtype())
        throw Error("cond: output " + std::to_string(i) + " is " + type_of(t[i]) + " in the true branch and " +
                    type_of(f[i]) + " in the false one; both branches must return the same types");
  };
  // Inside a trace the program must serve every later call: both branches run and each result
  // is selected on the device (what JAX does with cond under vmap).
  if (!taping() || backward_differentiated() || !pred.impl()->varying.empty()) {
    // A gradient of a gradient differentiates the branches' own backward passes: each op stays
    // on the tapes (the selection below is then made before the branches' backward passes). So
    // with a predicate that differs between devices: a branch's backward pass sums over the
    // devices what reaches a value the same on all of them (autodiff.cpp), which must see only
    // the devices that took that branch.
    const std::vector<Array> t = on_true(), f = on_false();
    check(t, f);
    std::vector<Array> out;
    for (size_t i = 0; i < t.size(); ++i) out.push_back(where(p, t[i], f[i]));
    return out;
  }
  // The gradients are selected the same way, after each branch's backward pass, not before: the
  // untaken branch's backward pass gets a zero cotangent, and 0 * inf (log's 1/x at 0) would be
  // NaN in a sum of the two. Each branch is isolated on its own, so each has its own backward
  // pass (what it recorded), and the selection records nothing: the rule below is the only way
  // cotangents reach what the branches read or return.
  struct Branch {
    std::vector<Array> leaves, closure;
    std::function<std::vector<Array>(const std::vector<Array>&)> backward;
  };
  const auto isolate = [](const std::function<std::vector<Array>()>& run) {
    Branch b;
    const TapeIsolation isolated({});
    b.leaves = run();
    b.closure = isolated.closure();
    b.backward = isolated.backward(b.leaves);
    return b;
  };
  const Branch tb = isolate(on_true), fb = isolate(on_false);
  check(tb.leaves, fb.leaves);
  std::vector<Array> out;
  {
    const TapeIsolation quiet({});
    for (size_t i = 0; i < tb.leaves.size(); ++i) out.push_back(where(p, tb.leaves[i], fb.leaves[i]));
  }
  // What either branch read, or returned as it was (an operand passed through), that a tape
  // tracks; and where each branch's cotangents go in it.
  std::vector<Array> closure;
  const auto index_of = [&closure](const Array& a) {
    size_t at = 0;
    while (at < closure.size() && closure[at].impl() != a.impl()) ++at;
    if (at == closure.size()) closure.push_back(a);
    return at;
  };
  struct Route {
    std::vector<size_t> closure;                          // the branch's closure, in the union
    std::vector<std::pair<size_t, size_t>> pass_through;  // (output, union index) of returned inputs
  };
  const auto route = [&](const Branch& b) {
    Route r;
    for (const Array& c : b.closure) r.closure.push_back(index_of(c));
    for (size_t k = 0; k < b.leaves.size(); ++k) {
      const Array& leaf = b.leaves[k];
      const bool read = std::any_of(b.closure.begin(), b.closure.end(), [&](const Array& c) { return c.impl() == leaf.impl(); });
      if (leaf.valid() && !read && tracked(leaf)) r.pass_through.emplace_back(k, index_of(leaf));
    }
    return r;
  };
  const Route rt_true = route(tb), rt_false = route(fb);
  if (closure.empty()) return out;
  on_tape(out, closure, [p, closure, rt_true, rt_false, bt = tb.backward, bf = fb.backward](const std::vector<Array>& cts) {
    const auto gather = [&](const Route& r, const std::vector<Array>& own) {
      std::vector<Array> g(closure.size());
      for (size_t i = 0; i < own.size() && i < r.closure.size(); ++i) g[r.closure[i]] = own[i];
      for (const auto& [k, at] : r.pass_through)
        if (k < cts.size() && cts[k].valid()) g[at] = g[at].valid() ? g[at] + cts[k] : cts[k];
      return g;
    };
    const std::vector<Array> gt = gather(rt_true, bt(cts)), gf = gather(rt_false, bf(cts));
    std::vector<Array> g;
    for (size_t i = 0; i < closure.size(); ++i) {
      if (!gt[i].valid() && !gf[i].valid()) {
        g.emplace_back();
        continue;
      }
      g.push_back(where(p, gt[i].valid() ? gt[i] : zeros_like(closure[i]), gf[i].valid() ? gf[i] : zeros_like(closure[i])));
    }
    return g;
  });
  return out;
}

}  // namespace meshvk::detail

