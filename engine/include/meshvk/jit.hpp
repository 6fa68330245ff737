#pragma once
// jax.jit: trace a function of Arrays once per (shapes, dtypes, shardings), keep the per-device
// command buffers it recorded, and replay them on later calls.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/estimate.hpp"
#include "meshvk/sharding.hpp"
#include "meshvk/source_location.hpp"
#include "meshvk/tree.hpp"

namespace meshvk {

struct JitOptions {
  // Per argument: the layout to put it in (nullopt: follow the data), as jax.jit's in_shardings.
  // For a structured argument (Params, a std::vector, std::pair or std::tuple) the entry is one
  // sharding for every Array in it, or a ShardingTree shaped like it (JAX's prefix rule, as
  // out_shardings below).
  std::vector<ShardingTree> in_shardings;
  // The results' layouts, as jax.jit's out_shardings: one entry per result of a function that
  // returns several (a std::vector, std::pair or std::tuple), or one entry for the whole result,
  // which for a structured result may be a ShardingTree shaped like it (a list for a pair, tuple or
  // vector, a dict by name for Params) or one sharding for every Array in it (JAX's prefix rule).
  std::vector<ShardingTree> out_shardings;
  std::string name = "f";
  // jax.jit's static_argnums: the arguments that are static values (ints, bools, floats, enums,
  // strings) keying the cache, so the function is traced again for a new value. Any argument that
  // is not an Array or a structure of them (Params, std::vector, std::pair, std::tuple) is static
  // anyway; when this list is given it must name exactly those arguments. With static arguments,
  // in_shardings has one entry per non-static argument.
  std::vector<int> static_argnums;
  // jax.jit's donate_argnums: the arguments (positions, as static_argnums) whose Arrays the call
  // may reuse. Each such Array is deleted by the call (Array::is_deleted(); reading it raises an
  // Error naming the donation), so pass what you will not read again: the parameters and optimizer
  // state of `params, state = step(params, state, batch)`. A result of this function passed back
  // donated is not copied before the call overwrites it (each of its buffers once per step, and
  // memory held twice, otherwise). Inside another trace, under grad or in a shard_map body the
  // function runs inline and donates nothing (as JAX ignores a nested jit's donation).
  std::vector<int> donate_argnums;
  // Where jit() was called (jit fills it in): the program text names this line beside a
  // collective that no call with a line of its own inserted (an operator such as a + b, an
  // out_shardings move).
  SourceLocation location{};
};

using JitBody = std::function<std::vector<Array>(const std::vector<Array>&)>;

// How many times data moved between devices, and how many bytes each device sent, per kind
// (collectives as the program text lists them: a loop body's once; see CollectiveRecord::times).
struct CollectiveCount {
  int count = 0;
  uint64_t bytes = 0;
};

// One collective or reshard of a program, and where it came from: the rule that inserted it and
// the user's source line (the innermost call of meshvk's API from user code that inserted it; in a
// backward pass, the forward op's line, with `backward` set). `file` is empty where no line is
// known (an operator such as a + b, or a call the engine made on its own).
//
// `bytes` is what each device sends, each byte counted once (its data, not the link traffic of
// a particular schedule); S is the local operand's bytes, n the replica group's size:
//   collective-permute  S                     all-gather      S (the device's shard)
//   all-reduce          S                     reduce-scatter  (n - 1) * S / n
//   all-to-all          (n - 1) * S / n       reshard         the most bytes any one device sends
// (reduce-scatter and all-to-all keep their own 1/n; divisions round down; a group of one
// device moves nothing: 0), as the README's "collectives()" paragraph says.
struct CollectiveRecord {
  std::string kind;               // HLO's name: all-reduce, all-gather, reduce-scatter, reshard, ...
  std::vector<std::string> axes;  // the mesh axes it moves data along
  uint64_t bytes = 0;             // what each device sends, once (see above)
  std::string rule;               // "dot_general contracts dim 1 sharded on 'model'", "out_shardings[0]", ...
  std::string file;               // the source file's path, as SourceLocation::current() gives it
  uint32_t line = 0;
  std::string function;           // the enclosing function's name
  bool backward = false;
  uint64_t times = 1;             // how often one call runs it: in a loop body, the trip count
};

// jax.stages.Compiled.cost_analysis(), per device. The rules (XLA's HloCostAnalysis's, on the
// per-device program, counted per op from the local shapes, the same on every adapter):
// - matmul, einsum, dot_general: 2 * M * N * K per batch entry;
// - elementwise ops: one flop per element per arithmetic op (add, mul, max, compare, where, ...),
//   except exp, log, sqrt, rsqrt, pow, tanh, sigmoid, erf, the trigonometric and hyperbolic
//   functions and their inverses, which count one transcendental per element instead; casts
//   count nothing; a fused chain counts each of its ops;
// - reductions (sum, max, min, argmax, argmin): input elements - output elements;
// - copies, gathers, transposes, slices, fills, iota, random bits: no flops, only bytes;
// - bytes_accessed: what each op reads plus what it writes on the device (a fused chain: its
//   inputs and its output; a broadcast input: its own elements), through dtype_size();
// - collectives: neither flops nor bytes accessed (their local sums and copies included), but
//   bytes communicated, per (mesh axes, kind), as CollectiveRecord::bytes counts them;
// - a loop body (lax::scan, fori_loop, while_loop) counts once per iteration.
struct DeviceCost {
  int device = 0;
  uint64_t flops = 0;
  uint64_t transcendentals = 0;
  uint64_t bytes_accessed = 0;
};
struct Communication {
  std::vector<std::string> axes;  // the mesh axes of the replica groups (a tuple when several)
  std::string kind;               // HLO's name, as CollectiveRecord::kind
  uint64_t count = 0;             // collectives of this kind along these axes per call
  uint64_t bytes = 0;             // what each device sends over them per call
};
struct CostAnalysis {
  // The busiest device's numbers (each the largest over the devices): what bounds a step. Every
  // device's own are in `devices`. meshvk's shardings divide dimensions evenly, so the devices
  // differ only where the work does (an op that runs on some of them only, a value on one device).
  uint64_t flops = 0;
  uint64_t transcendentals = 0;
  uint64_t bytes_accessed = 0;
  std::vector<DeviceCost> devices;           // every device the program runs on, by id
  std::vector<Communication> communication;  // by (axes, kind)
  // What each device sends per call: over every collective, or along exactly `axes`.
  uint64_t bytes_communicated() const;
  uint64_t bytes_communicated(const std::vector<std::string>& axes) const;
  // As JAX's dict: "flops", "transcendentals", "bytes accessed", and "bytes communicated".
  std::map<std::string, double> as_dict() const;
};

// jax.stages.Compiled.memory_analysis(), per device. Sizes are the arrays' bytes (dtype_size()
// per element); a program keeps one buffer per value it made, for as long as it lives (a replay
// rewrites them), so they are all alive at once and the peak is their sum.
struct DeviceMemory {
  int device = 0;
  uint64_t argument_size_in_bytes = 0;  // the program's own copies of its arguments
  uint64_t output_size_in_bytes = 0;
  uint64_t alias_size_in_bytes = 0;     // outputs that are an argument's buffer (f returning x)
  uint64_t temp_size_in_bytes = 0;      // every other buffer the program made
  uint64_t peak_memory_in_bytes = 0;    // argument + output - alias + temp
  // What the program takes from the device's pool: its buffers, each rounded up to the pool's
  // alignment (256 bytes or the adapter's larger buffer-offset alignment). The first call (the
  // trace) raises Runtime::memory_stats(device).peak_bytes_in_use by exactly this much over
  // bytes_in_use before it, given arguments already in their in_shardings and nothing else
  // allocating or freeing meanwhile (tests/test_cost_analysis.cpp measures it).
  uint64_t pool_bytes = 0;
  // Arrays from outside the program it reads (a closed-over array): not its own, not counted above.
  uint64_t captured_size_in_bytes = 0;
};
struct MemoryAnalysis {
  // The largest over the devices, each field on its own (for even shards, every device's).
  uint64_t argument_size_in_bytes = 0;
  uint64_t output_size_in_bytes = 0;
  uint64_t alias_size_in_bytes = 0;
  uint64_t temp_size_in_bytes = 0;
  uint64_t generated_code_size_in_bytes = 0;  // 0: kernels are compiled per runtime and shared
  uint64_t peak_memory_in_bytes = 0;
  uint64_t pool_bytes = 0;
  uint64_t captured_size_in_bytes = 0;
  std::vector<DeviceMemory> devices;  // every device the program runs on, by id
};

// A compiled program, as jax.jit(f).lower(args) gives it.
//
// Accessors of the public value classes (Lowered, Array, Mesh, PartitionSpec, NamedSharding,
// Sharding, Runtime, ...) return a reference only when called on an lvalue; on a temporary they
// return a copy, so `for (auto& kv : f.lower(x).collective_counts())` and
// `const auto& s = (x + 1).shape();` hold the value rather than a reference into a destroyed
// object.
class Lowered {
 public:
  Lowered(std::string text, std::map<std::string, CollectiveCount> counts,
          std::vector<CollectiveRecord> collectives = {}, CostAnalysis cost = {}, MemoryAnalysis memory = {},
          std::shared_ptr<const ProgramGraph> graph = {})
      : text_(std::move(text)),
        counts_(std::move(counts)),
        collectives_(std::move(collectives)),
        cost_(std::move(cost)),
        memory_(std::move(memory)),
        graph_(std::move(graph)) {}
  // The per-device program: local shapes, each op, every collective with its replica groups and
  // bytes (HLO's names: all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute).
  const std::string& as_text() const& { return text_; }
  std::string as_text() && { return std::move(text_); }
  std::string as_text() const&& { return text_; }
  // Per collective kind, as DTensor's CommDebugMode counts them.
  const std::map<std::string, CollectiveCount>& collective_counts() const& { return counts_; }
  std::map<std::string, CollectiveCount> collective_counts() && { return std::move(counts_); }
  std::map<std::string, CollectiveCount> collective_counts() const&& { return counts_; }
  // Every collective and reshard in program order, with the rule and source line that made it
  // (the same as the "  # rule - file:line (function)" ends of as_text()'s lines).
  const std::vector<CollectiveRecord>& collectives() const& { return collectives_; }
  std::vector<CollectiveRecord> collectives() && { return std::move(collectives_); }
  std::vector<CollectiveRecord> collectives() const&& { return collectives_; }
  // FLOPs, transcendentals, bytes accessed per device and bytes communicated per mesh axes, per
  // call (see CostAnalysis for the rules).
  const CostAnalysis& cost_analysis() const& { return cost_; }
  CostAnalysis cost_analysis() && { return std::move(cost_); }
  CostAnalysis cost_analysis() const&& { return cost_; }
  // The program's memory per device: arguments, outputs, temporaries and their peak.
  const MemoryAnalysis& memory_analysis() const& { return memory_; }
  MemoryAnalysis memory_analysis() && { return std::move(memory_); }
  MemoryAnalysis memory_analysis() const&& { return memory_; }
  // The recorded program: every device's submissions and the waits between them, each with the
  // cost of what it runs (empty for a Lowered made by hand).
  const ProgramGraph& graph() const;
  // The step time this program would take on `hardware`, its critical path and each device's
  // busy, communicating and idle shares (meshvk/estimate.hpp; README "What would it cost on
  // real hardware").
  Estimate estimate(const Hardware& hardware) const;

 private:
  std::string text_;
  std::map<std::string, CollectiveCount> counts_;
  std::vector<CollectiveRecord> collectives_;
  CostAnalysis cost_;
  MemoryAnalysis memory_;
  std::shared_ptr<const ProgramGraph> graph_;
};

// The type-erased jitted function: a cache of compiled programs keyed by the arguments' shapes,
// dtypes and shardings. It may be called from several threads at once (see meshvk::Runtime):
// calls run one at a time under the runtime's lock, and a result another thread still holds is
// moved to a copy before a later call's replay rewrites the program's output buffers.
class JitFunction {
 public:
  JitFunction(JitBody body, JitOptions options);
  std::vector<Array> call(const std::vector<Array>& args) const;
  // The partitioned per-device program for these arguments (compiling it if needed): what each
  // device runs, with local shapes, and the collectives between devices.
  std::string program_text(const std::vector<Array>& args) const;
  Lowered lower(const std::vector<Array>& args) const;
  // Programs compiled so far, and how many times the function was traced.
  size_t cache_size() const;
  size_t traces() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

namespace detail {
[[noreturn]] void jit_static_argnums_error(const std::string& name, int argnum, size_t arguments, bool traced);
[[noreturn]] void jit_unlisted_static_error(const std::string& name, size_t argnum);
[[noreturn]] void jit_tree_shardings_error(const std::string& name, size_t given, size_t wanted);
// donate_argnums (argument positions) as positions among the flattened Arrays, given which
// arguments are traced and how many Arrays each holds; an Error for a static or missing one.
std::vector<int> jit_donated_leaves(const std::string& name, const std::vector<int>& donate_argnums,
                                    const std::vector<bool>& traced, const std::vector<size_t>& leaf_counts);
// out_shardings as one tree for the whole result: its one entry, or a list of its entries.
ShardingTree whole_result_tree(const std::vector<ShardingTree>& out_shardings);
// Each result moved to its sharding (nullopt: left as it is), inside the trace.
std::vector<Array> jit_place_outputs(std::vector<Array> results, const LeafShardings& shardings);
}  // namespace detail

template <class F>
class Jitted {
 public:
  Jitted(F f, JitOptions options)
      : f_(f),
        options_(options),
        fn_(
            [f](const std::vector<Array>& args) -> std::vector<Array> {
              return call_with(f, args);
            },
            std::move(options)),
        trees_(std::make_shared<Trees>()) {}

  template <class... A>
  auto operator()(const A&... args) const {
    using R = std::invoke_result_t<const F&, const A&...>;
    if constexpr ((std::is_same_v<A, Array> && ...) && fn_path<A...>()) {
      if (!options_.static_argnums.empty()) check_static_argnums(std::array<bool, sizeof...(A)>{((void)sizeof(A), true)...});
      std::vector<Array> out = fn_.call({args...});
      if constexpr (std::is_same_v<R, Array>) {
        return out.front();
      } else {
        return out;
      }
    } else {
      return call_tree(args...);
    }
  }
  // Times the function was traced and programs compiled, over every static value and structure.
  size_t traces() const { return fn_.traces() + trees_->sum([](const JitFunction& f) { return f.traces(); }); }
  size_t cache_size() const { return fn_.cache_size() + trees_->sum([](const JitFunction& f) { return f.cache_size(); }); }
  template <class... A>
  std::string program_text(const A&... args) const {
    if constexpr ((std::is_same_v<A, Array> && ...) && fn_path<A...>()) {
      return fn_.program_text({args...});
    } else {
      const auto [entry, leaves] = prepare(args...);
      return entry->fn->program_text(leaves);
    }
  }
  template <class... A>
  Lowered lower(const A&... args) const {
    if constexpr ((std::is_same_v<A, Array> && ...) && fn_path<A...>()) {
      return fn_.lower({args...});
    } else {
      const auto [entry, leaves] = prepare(args...);
      return entry->fn->lower(leaves);
    }
  }
  const JitFunction& function() const& { return fn_; }
  JitFunction function() const&& { return fn_; }  // a temporary's: a copy (shares the cache)

 private:
  static std::vector<Array> call_with(const F& f, const std::vector<Array>& args) {
    return dispatch(f, args, std::make_index_sequence<max_arity>{});
  }
  static constexpr size_t max_arity = 8;
  template <size_t... I>
  static std::vector<Array> dispatch(const F& f, const std::vector<Array>& args, std::index_sequence<I...>) {
    std::vector<Array> out;
    bool called = false;
    (try_arity<I>(f, args, out, called), ...);
    if (!called) throw_arity(args.size());
    return out;
  }
  template <size_t N>
  static void try_arity(const F& f, const std::vector<Array>& args, std::vector<Array>& out, bool& called) {
    if constexpr (N > 0 || std::is_invocable_v<F>) {
      if (called || args.size() != N) return;
      if constexpr (invocable_n<N>()) {
        auto result = [&]<size_t... I>(std::index_sequence<I...>) { return f(args[I]...); }(std::make_index_sequence<N>{});
        if constexpr (std::is_same_v<decltype(result), Array>) out = {result};
        else if constexpr (std::is_convertible_v<decltype(result), std::vector<Array>>) out = std::move(result);
        else return;  // a structured result: only the call_tree path runs such a function
        called = true;
      }
    }
  }
  template <size_t N>
  static constexpr bool invocable_n() {
    return []<size_t... I>(std::index_sequence<I...>) {
      return std::is_invocable_v<F, decltype((void)I, std::declval<const Array&>())...>;
    }(std::make_index_sequence<N>{});
  }
  [[noreturn]] static void throw_arity(size_t n);

  // Arrays in, an Array or a vector of them out: the type-erased JitFunction alone. It calls f
  // with fewer than max_arity Arrays; more go through the structured path, which calls f with
  // any number (8 Array arguments were an Error saying f "cannot be called" with them).
  template <class... A>
  static constexpr bool fn_path() {
    using R = std::invoke_result_t<const F&, const A&...>;
    return sizeof...(A) < max_arity && (std::is_same_v<R, Array> || std::is_same_v<R, std::vector<Array>>);
  }

  // Functions with static arguments or structured arguments and results: one JitFunction per
  // static values and structure (JAX's cache key), over the flattened Arrays.
  struct Entry {
    std::optional<JitFunction> fn;
    std::mutex mutex;
    std::shared_ptr<void> result_skeleton;  // the result's structure, recorded by the trace
  };
  struct Trees {
    std::mutex mutex;
    std::map<std::string, std::shared_ptr<Entry>> entries;
    template <class G>
    size_t sum(G g) {
      std::lock_guard lock(mutex);
      size_t n = 0;
      for (const auto& kv : entries) n += g(*kv.second->fn);
      return n;
    }
  };

  template <size_t N>
  void check_static_argnums(const std::array<bool, N>& traced) const {
    for (const int k : options_.static_argnums)
      if (k < 0 || static_cast<size_t>(k) >= N || traced[static_cast<size_t>(k)])
        detail::jit_static_argnums_error(options_.name, k, N, k >= 0 && static_cast<size_t>(k) < N);
    for (size_t i = 0; i < N; ++i)
      if (!traced[i] && std::find(options_.static_argnums.begin(), options_.static_argnums.end(), static_cast<int>(i)) ==
                            options_.static_argnums.end())
        detail::jit_unlisted_static_error(options_.name, i);
  }

  template <class A>
  using Proto = std::conditional_t<detail::is_leafy_v<A>, std::remove_cvref_t<A>, detail::StaticStored<A>>;

  // The entry for these arguments (made on first use) and their Arrays.
  template <class... A>
  std::pair<std::shared_ptr<Entry>, std::vector<Array>> prepare(const A&... args) const {
    using R = std::invoke_result_t<const F&, const A&...>;
    static_assert(detail::is_leafy_v<R>,
                  "jit: the function must return an Array, Params, nn::AdamState, or a std::vector / "
                  "std::pair / std::tuple of them");
    constexpr size_t n = sizeof...(A);
    const std::array<bool, n> traced{detail::is_leafy_v<A>...};
    if (!options_.static_argnums.empty()) check_static_argnums(traced);
    // The key: each argument's structure (with its Arrays' types, on which the result's structure
    // may depend) or static value; the leaves: the traced Arrays.
    std::string key;
    std::vector<Array> leaves;
    std::vector<size_t> leaf_counts;
    (
        [&](const auto& x) {
          using T = std::remove_cvref_t<decltype(x)>;
          const size_t before = leaves.size();
          if constexpr (detail::Tree<T>::leafy) {
            // The C++ type too: a std::pair and a std::tuple of two Arrays have one structure
            // text ("(AA)"), yet f (a generic lambda) may return different types for them, and
            // an entry's result skeleton is cast back to the caller's result type.
            key += typeid(T).name();
            detail::Tree<T>::structure(x, key);
            detail::Tree<T>::flatten(x, leaves);
            for (size_t i = before; i < leaves.size(); ++i)
              key += leaves[i].valid() ? type_of(leaves[i]) + "," : std::string("empty,");
          } else {
            key += "S" + detail::static_key(detail::StaticStored<T>(x));
          }
          key += ";";
          leaf_counts.push_back(leaves.size() - before);
        }(args),
        ...);
    std::lock_guard lock(trees_->mutex);
    auto found = trees_->entries.find(key);
    if (found == trees_->entries.end())
      found = trees_->entries
                  .emplace(key, make_entry<R, A...>(std::tuple<Proto<A>...>(proto_of(args)...),
                                                    traced, leaf_counts))
                  .first;
    return {found->second, std::move(leaves)};
  }

  template <class... A>
  auto call_tree(const A&... args) const {
    using R = std::invoke_result_t<const F&, const A&...>;
    const auto [entry, leaves] = prepare(args...);
    const std::vector<Array> out = entry->fn->call(leaves);
    std::lock_guard lock(entry->mutex);
    size_t pos = 0;
    return detail::Tree<R>::unflatten(*std::static_pointer_cast<R>(entry->result_skeleton), out,
                                      pos);
  }

  template <class T>
  static auto proto_of(const T& x) {
    if constexpr (detail::Tree<T>::leafy) return detail::Tree<T>::skeleton(x);
    else return detail::StaticStored<T>(x);
  }

  template <class R, class... A>
  std::shared_ptr<Entry> make_entry(std::tuple<Proto<A>...> protos, const std::array<bool, sizeof...(A)>& traced,
                                    const std::vector<size_t>& leaf_counts) const {
    auto entry = std::make_shared<Entry>();
    JitOptions options = options_;
    options.static_argnums.clear();
    options.donate_argnums = detail::jit_donated_leaves(options_.name, options_.donate_argnums,
                                                        std::vector<bool>(traced.begin(), traced.end()), leaf_counts);
    if (!options_.in_shardings.empty()) {
      // One per non-static argument (as JAX's), given to every Array of that argument.
      const size_t wanted = static_cast<size_t>(std::count(traced.begin(), traced.end(), true));
      if (options_.in_shardings.size() != wanted)
        detail::jit_tree_shardings_error(options_.name, options_.in_shardings.size(), wanted);
      detail::LeafShardings per_leaf;
      size_t k = 0;
      [&]<size_t... I>(std::index_sequence<I...>) {
        (
            [&] {
              if (!traced[I]) return;
              const ShardingTree& tree = options_.in_shardings[k++];
              if (tree.kind() == ShardingTree::Kind::leaf) {
                per_leaf.insert(per_leaf.end(), leaf_counts[I], tree.sharding());
              } else if constexpr (detail::is_leafy_v<A>) {
                detail::Tree<std::remove_cvref_t<A>>::shardings(
                    std::get<I>(protos), tree, per_leaf,
                    detail::TreePlace{options_.name, "argument " + std::to_string(I), "in_shardings"});
              }
            }(),
            ...);
      }(std::index_sequence_for<A...>{});
      options.in_shardings.assign(per_leaf.begin(), per_leaf.end());
    }
    // The body lays its results out itself: only it knows their structure.
    options.out_shardings.clear();
    std::optional<ShardingTree> out_tree;
    if (!options_.out_shardings.empty()) out_tree = detail::whole_result_tree(options_.out_shardings);
    Entry* self = entry.get();  // the body lives in the entry, so it never outlives it
    JitBody body = [f = f_, protos = std::move(protos), self, out_tree,
                    name = options_.name](const std::vector<Array>& leaves) {
      size_t pos = 0;
      R result = [&]<size_t... I>(std::index_sequence<I...>) {
        // Braced initialisation rebuilds the arguments in order, as they were flattened.
        const std::tuple<Rebuilt<A>...> rebuilt{rebuild<A>(std::get<I>(protos), leaves, pos)...};
        return f(detail_arg<A>(std::get<I>(rebuilt))...);
      }(std::index_sequence_for<A...>{});
      std::vector<Array> out;
      detail::Tree<R>::flatten(result, out);
      if (out_tree) {
        detail::LeafShardings shardings;
        detail::Tree<R>::shardings(result, *out_tree, shardings, detail::TreePlace{name, "the result"});
        out = detail::jit_place_outputs(std::move(out), shardings);
      }
      std::lock_guard lock(self->mutex);
      if (!self->result_skeleton) self->result_skeleton = std::make_shared<R>(detail::Tree<R>::skeleton(result));
      return out;
    };
    entry->fn.emplace(std::move(body), std::move(options));
    return entry;
  }

  template <class A>
  using Rebuilt = std::conditional_t<detail::is_leafy_v<A>, std::remove_cvref_t<A>, const detail::StaticStored<A>&>;
  template <class A>
  static Rebuilt<A> rebuild(const Proto<A>& proto, const std::vector<Array>& leaves, size_t& pos) {
    if constexpr (detail::is_leafy_v<A>) return detail::Tree<std::remove_cvref_t<A>>::unflatten(proto, leaves, pos);
    else return proto;
  }
  template <class A>
  static decltype(auto) detail_arg(const Rebuilt<A>& x) {
    if constexpr (detail::is_leafy_v<A>) return (x);
    else return detail::static_arg<A>(x);
  }

  F f_;
  JitOptions options_;
  JitFunction fn_;
  std::shared_ptr<Trees> trees_;
};

void jit_arity_error(size_t n);
template <class F>
void Jitted<F>::throw_arity(size_t n) {
  jit_arity_error(n);
  __builtin_unreachable();
}

template <class F>
Jitted<F> jit(F f, JitOptions options = {}, SourceLocation loc = SourceLocation::current()) {
  if (!options.location.file) options.location = loc;
  return Jitted<F>(std::move(f), std::move(options));
}

// A hard layout constraint inside jit (and a device_put outside it).
Array with_sharding_constraint(const Array& x, const Sharding& sharding,
          SourceLocation loc = SourceLocation::current());
namespace detail {
std::vector<Array> constrain_leaves(const std::vector<Array>& leaves, const LeafShardings& placed, SourceLocation loc);
}  // namespace detail

// jax.lax.with_sharding_constraint over a pytree (Params, a registered struct, vectors, ...): a
// sharding for every Array of x, or a tree shaped like x or a prefix of it (nullopt: as it is).
// The leaves are moved together as device_put(pytree) moves them: those each gathered whole
// along one split dimension over the same axes go as one packed all-gather (a layer's FSDP
// weights gathered together where the layer starts).
template <class T>
  requires(detail::Tree<T>::leafy && !std::is_same_v<T, Array>)
T with_sharding_constraint(const T& x, const ShardingTree& shardings, SourceLocation loc = SourceLocation::current()) {
  std::vector<Array> leaves;
  detail::Tree<T>::flatten(x, leaves);
  detail::LeafShardings placed;
  const std::string name = "with_sharding_constraint";
  detail::Tree<T>::shardings(x, shardings, placed, detail::TreePlace{name, "the value"});
  leaves = detail::constrain_leaves(leaves, placed, loc);
  size_t pos = 0;
  return detail::Tree<T>::unflatten(x, leaves, pos);
}

// Explicit mode: move x to another PartitionSpec over its own mesh (over use_mesh's mesh for an
// array on one device), or to any sharding.
Array reshard(const Array& x, const PartitionSpec& spec, SourceLocation loc = SourceLocation::current());
Array reshard(const Array& x, const Sharding& sharding, SourceLocation loc = SourceLocation::current());

}  // namespace meshvk
