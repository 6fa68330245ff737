#pragma once
// The per-device programs shard_map runs, as text, for tools that show them (the inspector's
// program view). A shard_map call has no name and is no jit function, so nothing else would
// let a viewer see its manual program: the local shapes each device computes on and the
// collectives, with their device groups and bytes.
//
//   meshvk::ShardMapWatch watch([&](const std::string& text) { std::cout << text; });
//   meshvk::shard_map([](const Array& v) { return meshvk::psum(v, "x"); }, mesh, {P("x")}, P())(x);
//
// prints the program of that call:
//
//   shard_map on mesh (8,) ('x',)
//     in0: float32[32] PartitionSpec('x',) -> local float32[4]
//     all-reduce (psum) over ('x',): replica_groups={{0,...,7}}, local float32[4], 16 B per device
//     out0: local float32[4] -> float32[4] PartitionSpec()
//
// Inside a jit trace the same lines (indented) are part of the jit function's program text.
#include <functional>
#include <string>

namespace meshvk {

class ShardMapWatch {
 public:
  using Callback = std::function<void(const std::string& program_text)>;
  // From now until the watch is destroyed, each shard_map call that returns on this thread
  // passes its program text to `callback` (on this thread); an empty callback is an Error.
  // Watches nest: the innermost gets the calls, and they may be destroyed in any order (on the
  // thread that made them).
  explicit ShardMapWatch(Callback callback);
  ~ShardMapWatch();
  ShardMapWatch(const ShardMapWatch&) = delete;
  ShardMapWatch& operator=(const ShardMapWatch&) = delete;

 private:
  Callback callback_;
  ShardMapWatch* outer_;
  friend struct ShardMapWatchAccess;
};

}  // namespace meshvk
