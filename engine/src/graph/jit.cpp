// jit: the first call with new shapes, dtypes or shardings traces the function by running it
// under a capture (every op runs for real and its command buffers are kept, with the buffers they
// touch); later calls replay the captured program with the new inputs copied in.
#include "meshvk/jit.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "exec/program.hpp"
#include "exec/program_log.hpp"
#include "graph/analysis.hpp"
#include "graph/array_impl.hpp"
#include "graph/call_site.hpp"
#include "graph/loop_support.hpp"
#include "graph/manual_context.hpp"
#include "graph/op_scope.hpp"
#include "graph/partial_sum.hpp"
#include "graph/tape.hpp"
#include "meshvk/error.hpp"
#include "meshvk/mesh_context.hpp"
#include "meshvk/runtime.hpp"
#include "profile/hooks.hpp"
#include "runtime/process_group.hpp"

namespace meshvk {

namespace {

// Several processes: every process must have traced the same transfers between processes (the
// same program), or the counts each keeps of the others' work part ways and the job would hang
// or read the wrong bytes. A digest of them is compared right after the trace; a difference
// ends the job at once, naming the function.
void check_same_program(detail::RuntimeState& rt, const detail::Capture& capture,
                        const std::vector<Array>& results, const std::string& name) {
  uint64_t digest = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) digest = (digest ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (const auto& s : capture.submissions)
    if (rt.is_peer_timeline(s.timeline)) mix(static_cast<uint64_t>(s.timeline) << 32 | (s.signal - capture.start_values[s.timeline]));
  for (const auto& use : capture.ring_uses) {
    mix(static_cast<uint64_t>(use.src_process) << 32 | static_cast<uint32_t>(use.dst_process));
    mix(use.bytes);
  }
  // And what it returns: the same transfers may serve different programs.
  for (const Array& r : results) {
    mix(static_cast<uint64_t>(r.dtype()));
    for (const int64_t d : r.shape()) mix(static_cast<uint64_t>(d));
    if (const NamedSharding* n = r.sharding().named())
      for (const char c : n->spec().to_string()) mix(static_cast<uint8_t>(c));
  }
  const std::vector<uint8_t> all = rt.exchange(&digest, sizeof digest, "the digest of jit(" + name + ")'s trace");
  for (int p = 0; p < rt.process_count(); ++p) {
    uint64_t theirs;
    std::memcpy(&theirs, all.data() + p * sizeof digest, sizeof digest);
    if (theirs != digest)
      detail::ProcessGroup::get()->abort(
          "jit(" + name + "): process " + std::to_string(rt.process_index()) +
          " traced a program whose transfers between processes differ from process " +
          std::to_string(p) + "'s; every process must run the same program; ending the job");
  }
}


// A sharding as the cache keys it: specs that are equal (==) key one program, so P('a', None),
// which a user writes, and P('a'), which ops give their results, do not trace twice, nor do
// P(('a',)) and P('a') (a one-axis tuple, as JAX canonicalizes it).
std::string sharding_key(const Sharding& s) {
  const NamedSharding* n = s.named();
  if (!n) return s.to_string();
  std::vector<SpecEntry> entries = n->spec().trimmed().entries();
  for (SpecEntry& e : entries) e.tuple = e.axes.size() > 1;
  return NamedSharding(n->mesh(), PartitionSpec(entries)).to_string();
}

std::string layout_text(const Array& x) {
  std::string s = type_of(x);
  if (const NamedSharding* n = x.sharding().named()) s += " " + n->spec().to_string();
  else s += " on device " + std::to_string(x.sharding().device_ids().front());
  return s;
}

struct Compiled {
  std::unique_ptr<exec::Program> program;
  std::string text;
  std::map<std::string, CollectiveCount> counts;
  std::vector<CollectiveRecord> collectives;
  CostAnalysis cost;
  MemoryAnalysis memory;
  std::shared_ptr<const ProgramGraph> graph;  // Lowered::estimate's
  // The results handed out last time: they share the program's output buffers, which the next
  // replay overwrites, so any still referenced then are moved to copies first.
  std::vector<std::weak_ptr<const detail::ArrayImpl>> lent;
  // Whether each traced result was committed: a replay's results are as free to move as the
  // trace's (as f's eager results would be), so an uncommitted parameter stays uncommitted
  // from one jitted step to the next.
  std::vector<bool> committed;
  // The trace decided something on the host (a while_loop's trip count): the recorded program
  // holds one answer, so every call traces again.
  bool retrace = false;

  // `donated`: results this call deletes (donate_argnums), which need no copy; returns those it
  // left holding the program's buffers.
  std::vector<const detail::ArrayImpl*> detach_lent(detail::RuntimeState& rt,
                                                    const std::vector<const detail::ArrayImpl*>& donated = {}) {
    std::vector<const detail::ArrayImpl*> left;
    for (auto& w : lent)
      // Only the buffers change: other threads may read the shape and sharding without the
      // runtime's lock (the buffers are read under it).
      if (const auto a = w.lock()) {
        if (!a->donated_to.empty()) continue;
        if (std::find(donated.begin(), donated.end(), a.get()) != donated.end()) {
          left.push_back(a.get());
          continue;
        }
        a->value.shards = exec::copy_value(rt, a->value).shards;
        a->lent = false;
      }
    lent.clear();
    return left;
  }
  std::vector<Array> lend(const std::shared_ptr<detail::RuntimeState>& rt, std::vector<exec::ShardedValue> values) {
    std::vector<Array> out;
    for (size_t i = 0; i < values.size(); ++i) {
      auto& v = values[i];
      out.push_back(detail::make_array(rt, std::move(v), i >= committed.size() || committed[i]));
      lent.push_back(out.back().impl());
      out.back().impl()->lent = true;  // nothing may share these buffers: see shareable_value
    }
    return out;
  }
};

}  // namespace

struct JitFunction::State {
  JitBody body;
  JitOptions options;
  // Recursive: the function may call itself while it is traced (recursion over shapes, as a
  // Python function under jax.jit may; the inner call runs inline), or ask traces() and
  // cache_size(); a plain mutex would deadlock that thread.
  std::recursive_mutex mutex;
  std::map<std::string, Compiled> cache;
  size_t traces = 0;

  // transient: the placed arrays live only for this call's trace (which copies them) or replay
  // (which copies them into the program's inputs), so a previous result still lent by a program
  // may be placed by sharing its buffers; device_put would copy it (see shareable_value), once
  // per step of a training loop given in_shardings.
  // Argument i's in_sharding: each argument here is one Array, so its entry must be a leaf.
  std::optional<Sharding> leaf_in_sharding(size_t i) const {
    const ShardingTree& tree = options.in_shardings[i];
    if (tree.kind() != ShardingTree::Kind::leaf)
      throw Error("jit(" + options.name + "): in_shardings[" + std::to_string(i) + "] is " + tree.describe() +
                  " but argument " + std::to_string(i) + " is an Array; give a sharding (or nullopt)");
    return tree.sharding();
  }

  std::vector<Array> place_inputs(const std::vector<Array>& args, bool transient = false) const {
    if (!options.in_shardings.empty() && options.in_shardings.size() != args.size())
      throw Error("jit(" + options.name + "): " + std::to_string(options.in_shardings.size()) + " in_shardings for " +
                  std::to_string(args.size()) + " arguments; give one per argument (nullopt to follow the data)");
    std::vector<Array> placed;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].valid()) throw Error("jit(" + options.name + "): argument " + std::to_string(i) + " is an empty Array");
      const std::optional<Sharding> want = options.in_shardings.empty() ? std::nullopt : leaf_in_sharding(i);
      const detail::ArrayImpl& impl = *args[i].impl();
      if (want && transient && impl.lent && want->is_equivalent_to(args[i].sharding(), args[i].ndim())) {
        exec::ShardedValue v = detail::materialized(args[i]);
        v.sharding = *want;
        placed.push_back(detail::make_array(impl.runtime, std::move(v), true, impl.varying));
        continue;
      }
      const exec::RuleScope rule([&] { return "jit(" + options.name + "): in_shardings[" + std::to_string(i) + "]"; });
      try {
        placed.push_back(want ? device_put(args[i], *want) : args[i]);
      } catch (const Error& e) {
        throw Error("jit(" + options.name + "): argument " + std::to_string(i) + " (" + type_of(args[i]) +
                    ") cannot take its in_shardings entry: " + e.what());
      }
    }
    return placed;
  }

  // A program is recorded for one runtime's devices: the key names the runtime and each
  // argument's devices, which a sharding's text does not (two meshes of one shape on other
  // devices print alike).
  static std::string key_of(const std::vector<Array>& args) {
    std::string key =
        "runtime " + std::to_string(Runtime::current().state()->profiler().runtime()) + ";" + mesh_context_key();
    for (const Array& a : args) {
      key += type_of(a) + "|" + sharding_key(a.sharding()) + (a.committed() ? "|c|" : "|u|");
      for (const int d : a.sharding().device_ids()) key += std::to_string(d) + ",";
      key += ";";
    }
    return key;
  }

  // An Array or a vector of them: out_shardings has one entry per result, or one for all.
  std::vector<Array> place_outputs(std::vector<Array> results) const {
    if (!options.out_shardings.empty()) {
      if (options.out_shardings.size() != 1 && options.out_shardings.size() != results.size())
        throw Error("jit(" + options.name + "): " + std::to_string(options.out_shardings.size()) +
                    " out_shardings for " + std::to_string(results.size()) +
                    " results; give one per result, or one for all of them");
      detail::LeafShardings shardings;
      const detail::TreePlace where{options.name, "the result"};
      const ShardingTree tree = detail::whole_result_tree(options.out_shardings);
      if (results.size() == 1) detail::Tree<Array>::shardings(results.front(), tree, shardings, where);
      else detail::Tree<std::vector<Array>>::shardings(results, tree, shardings, where);
      results = detail::jit_place_outputs(std::move(results), shardings);
    }
    // Partial results (gradients over 'data', say) summed together: few all-reduces, not one each.
    detail::resolve_together(results);
    // Results that read the same arrays (an optimizer's parameter and moments): one kernel.
    detail::materialize_together(results);
    for (const Array& r : results) detail::materialized(r);
    return results;
  }

  // The Arrays of `args` that donate_argnums names (leaf positions), each once; an Error for a
  // position past the arguments, or a donated Array also passed in a position not donated.
  std::vector<const detail::ArrayImpl*> donated(const std::vector<Array>& args) const {
    std::vector<const detail::ArrayImpl*> out;
    for (const int k : options.donate_argnums) {
      if (k < 0 || static_cast<size_t>(k) >= args.size())
        throw Error("jit(" + options.name + "): donate_argnums has " + std::to_string(k) + " but the function was called with " +
                    std::to_string(args.size()) + " arguments; give positions 0 to " +
                    std::to_string(static_cast<int>(args.size()) - 1));
      const detail::ArrayImpl* impl = args[static_cast<size_t>(k)].impl().get();
      if (!impl->donated_to.empty())
        throw Error("jit(" + options.name + "): argument " + std::to_string(k) + " was donated to " + impl->donated_to +
                    " already and deleted; pass what that call returned");
      if (std::find(out.begin(), out.end(), impl) == out.end()) out.push_back(impl);
    }
    for (size_t i = 0; i < args.size(); ++i)
      if (std::find(options.donate_argnums.begin(), options.donate_argnums.end(), static_cast<int>(i)) ==
              options.donate_argnums.end() &&
          std::find(out.begin(), out.end(), args[i].impl().get()) != out.end())
        throw Error("jit(" + options.name + "): one Array is passed donated and again as Array " + std::to_string(i) +
                    " of the call's arguments (counting the Arrays inside structured ones), which is not donated;"
                    " donate neither, or pass a copy (meshvk::copy(x))");
    return out;
  }

  // Deletes the donated Arrays: their buffers go (a result of this function passed back donated
  // was not copied before the replay overwrote it).
  void delete_donated(const std::vector<const detail::ArrayImpl*>& arrays) const {
    for (const detail::ArrayImpl* a : arrays) {
      a->value.shards.clear();
      a->pending = nullptr;
      a->partial = nullptr;
      a->lent = false;
      a->donated_to = "jit(" + options.name + ")";
    }
  }

  // Traces `args` into a program; returns the trace's own results (copied out of the program).
  std::vector<Array> trace(const std::string& key, const std::vector<Array>& args) {
    auto rt = Runtime::current().state();
    const profile::JitScope profiled(rt->profiler(), options.name, true);  // profile hook: trace
    // The program owns its input buffers and rewrites them on every replay: it traces copies, so
    // the arrays it was first called with keep their values.
    std::vector<Array> owned;
    std::vector<exec::ShardedValue> inputs;
    {
      const detail::OpScope op_scope("jit input");  // profile hook: as a replay's refresh says
      for (const Array& a : args) {
        owned.push_back(copy(a));
        inputs.push_back(detail::materialized(owned.back()));
      }
    }
    auto capture = std::make_unique<detail::Capture>();
    exec::ProgramLog log;
    kernels::CostLog cost_log;
    // The program text calls the inputs in0, in1, ... also where an op reads them.
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!inputs[i].shards.empty()) log.name_value(inputs[i].shards.front().get(), "in" + std::to_string(i));
    std::vector<Array> results;
    const uint64_t decided = detail::host_decisions();
    rt->begin_capture(capture.get());
    try {
      // Ops that carry no line of their own (operators, out_shardings) name jit's.
      const detail::UserCallSite jit_site(options.location);
      results = place_outputs(body(owned));
    } catch (...) {
      rt->end_capture();
      exec::Program failed(rt, std::move(capture), {}, {});  // waits for and frees what ran
      throw;
    }
    rt->end_capture();
    ++traces;
    if (rt->multi_process()) check_same_program(*rt, *capture, results, options.name);
    std::vector<exec::ShardedValue> outputs;
    for (const Array& r : results) outputs.push_back(detail::materialized(r));

    // The devices the program runs on: those of its inputs and results and every device that ran
    // work in it (a 2x2 mesh's program runs on 4 devices, whatever the runtime has).
    std::set<int> devices;
    for (const Array& a : args)
      for (const int d : a.sharding().device_ids()) devices.insert(d);
    for (const Array& r : results)
      for (const int d : r.sharding().device_ids()) devices.insert(d);
    for (const auto& s : capture->submissions) devices.insert(rt->device_of(s.timeline));
    std::ostringstream text;
    text << "jit(" << options.name << ") on " << devices.size() << (devices.size() == 1 ? " device\n" : " devices\n");
    for (size_t i = 0; i < args.size(); ++i) text << "  in" << i << ": " << layout_text(args[i]) << "\n";
    for (const auto& line : log.lines()) text << "  " << line << "\n";
    for (size_t i = 0; i < results.size(); ++i) text << "  out" << i << ": " << layout_text(results[i]) << "\n";

    Compiled& c = cache[key];
    c.memory = detail::memory_analysis_of(*capture, inputs, outputs, devices);
    c.graph = detail::program_graph_of(*rt, *capture, cost_log.events());
    detail::remember_traced(options.name, c.graph);
    std::vector<exec::ShardedValue> fed;
    for (const Array& a : args) fed.push_back(detail::materialized(a));
    c.program = std::make_unique<exec::Program>(rt, std::move(capture), inputs, outputs, fed);
    c.committed.clear();
    for (const Array& r : results) c.committed.push_back(r.committed());
    c.retrace = detail::host_decisions() != decided;
    c.text = text.str();
    c.counts.clear();
    c.collectives.clear();
    for (const auto& r : log.collectives()) {
      c.counts[r.kind].count += 1;
      c.counts[r.kind].bytes += r.bytes;
      c.collectives.push_back({r.kind, r.axes, r.bytes, r.rule, r.site.file ? r.site.file : "", r.site.line,
                               exec::short_function(r.site.function), r.site.backward, r.times});
    }
    c.cost = detail::cost_analysis_of(cost_log.per_device(), devices, c.collectives);
    return c.lend(rt, outputs);
  }
};

JitFunction::JitFunction(JitBody body, JitOptions options) : state_(std::make_shared<State>()) {
  state_->body = std::move(body);
  state_->options = std::move(options);
}

namespace {
// While program_text or lower compiles a program through call(): nothing is donated then, as
// lowering in JAX runs nothing.
thread_local int lowering = 0;
struct Lowering {
  Lowering() { ++lowering; }
  ~Lowering() { --lowering; }
};
}  // namespace

// Every entry point takes the runtime's lock before the function's own, in that order (a trace
// takes the runtime's lock again in each op, and a nested jit takes its own), so two threads
// calling jit functions, one inside the other's trace, cannot deadlock; and the whole trace or
// replay runs as one step of the runtime, between other threads' ops.
std::vector<Array> JitFunction::call(const std::vector<Array>& args) const {
  const auto runtime = Runtime::current().state();
  // The program runs on the current runtime: an argument of another one cannot reach it.
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].valid() && args[i].impl()->runtime != runtime)
      throw Error("jit(" + state_->options.name + "): argument leaf " + std::to_string(i) + " (" + type_of(args[i]) +
                  ") belongs to a meshvk::Runtime other than the current one; arrays cannot move between runtimes: "
                  "make them under the Runtime the call runs on");
  std::lock_guard runtime_lock(runtime->mutex());
  std::lock_guard lock(state_->mutex);
  const bool inline_call =
      runtime->capture() || detail::taping() || detail::current_manual_mesh() != nullptr;
  // Run inline, the body may return an argument as it is: then it must not share a lent buffer.
  const std::vector<Array> placed = state_->place_inputs(args, !inline_call);
  // Inside another jit's trace, under autodiff or in a shard_map body the function runs inline,
  // as JAX inlines a nested jit: a replay there would be invisible to the outer capture (whose
  // program would then wait on work outside it), to the tape (gradients would be zeros) and to
  // shard_map's replication check.
  if (inline_call) return state_->place_outputs(state_->body(placed));
  const std::vector<const detail::ArrayImpl*> donated =
      lowering ? std::vector<const detail::ArrayImpl*>{} : state_->donated(args);
  const std::string key = State::key_of(placed);
  auto it = state_->cache.find(key);
  if (it == state_->cache.end()) {
    std::vector<Array> out = state_->trace(key, placed);
    state_->delete_donated(donated);
    return out;
  }
  auto rt = Runtime::current().state();
  if (it->second.retrace) {
    {
      const detail::OpScope op_scope("copy");  // profile hook: last call's results move out
      it->second.detach_lent(*rt);
    }
    std::vector<Array> out = state_->trace(key, placed);
    state_->delete_donated(donated);
    return out;
  }
  std::lock_guard rt_lock(rt->mutex());
  const profile::JitScope profiled(rt->profiler(), state_->options.name, false);  // profile hook
  std::vector<const detail::ArrayImpl*> left;
  {
    const detail::OpScope op_scope("copy");  // profile hook: last call's results move out
    left = it->second.detach_lent(*rt, donated);
  }
  // From here the donated results left lent hold buffers the replay overwrites: if the call
  // fails, they are deleted all the same (the other donated Arrays are kept).
  struct DeleteLeft {
    const State& state;
    const std::vector<const detail::ArrayImpl*>& arrays;
    bool done = false;
    ~DeleteLeft() {
      if (!done) state.delete_donated(arrays);
    }
  } deleting{*state_, left};
  std::vector<exec::ShardedValue> inputs;
  for (const Array& a : placed) inputs.push_back(detail::materialized(a));
  // The replay records only the copies of the new inputs; the replayed spans keep the ops they
  // were traced with.
  const detail::OpScope op_scope("jit input");  // profile hook
  std::vector<Array> out = it->second.lend(rt, it->second.program->replay(inputs));
  deleting.done = true;
  state_->delete_donated(donated);
  return out;
}

std::string JitFunction::program_text(const std::vector<Array>& args) const {
  const auto runtime = Runtime::current().state();
  std::lock_guard runtime_lock(runtime->mutex());  // before the function's own: see call()
  {
    std::lock_guard lock(state_->mutex);
    const std::vector<Array> placed = state_->place_inputs(args);
    const std::string key = State::key_of(placed);
    auto it = state_->cache.find(key);
    if (it != state_->cache.end()) return it->second.text;
  }
  const Lowering donating_nothing;
  call(args);
  std::lock_guard lock(state_->mutex);
  return state_->cache.at(State::key_of(state_->place_inputs(args))).text;
}

Lowered JitFunction::lower(const std::vector<Array>& args) const {
  const auto runtime = Runtime::current().state();
  std::lock_guard runtime_lock(runtime->mutex());  // before the function's own: see call()
  const std::string text = program_text(args);
  std::lock_guard lock(state_->mutex);
  const Compiled& c = state_->cache.at(State::key_of(state_->place_inputs(args)));
  return Lowered(text, c.counts, c.collectives, c.cost, c.memory, c.graph);
}

size_t JitFunction::cache_size() const {
  std::lock_guard lock(state_->mutex);
  return state_->cache.size();
}

size_t JitFunction::traces() const {
  std::lock_guard lock(state_->mutex);
  return state_->traces;
}

std::vector<Array> detail::jit_place_outputs(std::vector<Array> results, const LeafShardings& shardings) {
  for (size_t i = 0; i < results.size() && i < shardings.size(); ++i) {
    if (!shardings[i]) continue;
    const Sharding& want = *shardings[i];
    if (!results[i].sharding().is_equivalent_to(want, results[i].ndim()))
      exec::log_op("out_shardings[" + std::to_string(i) + "]: " + results[i].sharding().to_string() + " -> " +
                   want.to_string());
    const exec::RuleScope rule([&] { return "out_shardings[" + std::to_string(i) + "]"; });
    try {
      results[i] = device_put(results[i], want);  // equivalent: the same buffers, the requested sharding object
    } catch (const Error& e) {
      throw Error("jit: result " + std::to_string(i) + " (" + type_of(results[i]) + ") cannot take out_shardings[" +
                  std::to_string(i) + "]: " + e.what());
    }
  }
  return results;
}

void jit_arity_error(size_t n) {
  throw Error("jit: the function cannot be called with " + std::to_string(n) +
              " Array arguments; check the number of arguments");
}

Array with_sharding_constraint(const Array& x, const Sharding& sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  if (!x.sharding().is_equivalent_to(sharding, x.ndim()))
    exec::log_op("with_sharding_constraint: " + x.sharding().to_string() + " -> " + sharding.to_string());
  const exec::RuleScope rule([] { return std::string("with_sharding_constraint"); });
  try {
    return device_put(x, sharding);
  } catch (const Error& e) {
    throw Error("with_sharding_constraint: " + type_of(x) + " cannot take " + sharding.to_string() + ": " + e.what());
  }
}

namespace detail {

std::vector<Array> constrain_leaves(const std::vector<Array>& leaves, const LeafShardings& placed, SourceLocation loc) {
  const UserCallSite call_site(loc);
  if (placed.size() != leaves.size()) device_put_tree_error("the shardings do not cover every Array of the value");
  for (size_t i = 0; i < leaves.size(); ++i)
    if (placed[i] && leaves[i].valid() && !leaves[i].sharding().is_equivalent_to(*placed[i], leaves[i].ndim()))
      exec::log_op("with_sharding_constraint: " + leaves[i].sharding().to_string() + " -> " + placed[i]->to_string());
  const exec::RuleScope rule([] { return std::string("with_sharding_constraint"); });
  return device_put_leaves(leaves, placed);
}

}  // namespace detail

Array reshard(const Array& x, const PartitionSpec& spec, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const NamedSharding* n = x.sharding().named();
  if (!n && get_abstract_mesh()) return reshard(x, sharding_in_context(spec, "reshard"));  // use_mesh's mesh
  if (!n)
    throw Error("reshard: the array is on a single device (" + x.sharding().to_string() +
                "); give a NamedSharding, make a mesh context with use_mesh, or device_put it onto a mesh first");
  return reshard(x, NamedSharding(n->mesh(), spec));
}

Array reshard(const Array& x, const Sharding& sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  if (!x.sharding().is_equivalent_to(sharding, x.ndim()))
    exec::log_op("reshard: " + x.sharding().to_string() + " -> " + sharding.to_string());
  const exec::RuleScope rule([] { return std::string("reshard"); });
  return device_put(x, sharding);
}

}  // namespace meshvk
