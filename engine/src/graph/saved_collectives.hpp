#pragma once
// Scan's saved collective results (residuals). Scan's backward pass runs each iteration's
// forward pass again from the carry it kept; the collectives in that forward pass would move
// their bytes a second time (dp_tp's all-reduces over 'model', fsdp's weight all-gathers, ring
// attention's ppermutes), where XLA's scan keeps the forward values the backward pass needs as
// stacked residuals. So, while the forward loop's body runs, every collective's result is
// recorded; the loop stacks them beside the ys; and while the backward pass runs the body's
// forward pass again, each collective gets its recorded result back instead of communicating.
//
// Matmul products are saved and handed back the same way (product_key): they are most of a
// layer's forward compute, which the backward pass would otherwise run again; what is left to
// recompute is elementwise work and reductions.
//
// A result is handed back only where the collective matches the recording in order (its kind,
// shapes, dtype, layouts, rule and source line) and the saved value's layout is the result's;
// from the first collective that does not match, everything runs as it would. So a body whose
// collectives differ between the two passes costs bytes, never correctness.
#include <optional>
#include <string>
#include <vector>

#include "collectives/collectives.hpp"
#include "graph/array_impl.hpp"

namespace meshvk::detail {

// While alive: the results of the collectives run on this thread are recorded (one call of a
// scan body in the forward loop).
class CollectiveRecorder {
 public:
  CollectiveRecorder();
  ~CollectiveRecorder();
  CollectiveRecorder(const CollectiveRecorder&) = delete;
  CollectiveRecorder& operator=(const CollectiveRecorder&) = delete;
  const std::vector<std::string>& keys() const;
  const std::vector<Array>& values() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  void* outer_;
};

// While alive: the collectives run on this thread get `values` back, in order, where their keys
// match `keys` (the backward pass's run of the body's forward pass).
class CollectiveReplay {
 public:
  CollectiveReplay(std::vector<std::string> keys, std::vector<Array> values);
  ~CollectiveReplay();
  CollectiveReplay(const CollectiveReplay&) = delete;
  CollectiveReplay& operator=(const CollectiveReplay&) = delete;
  // How many collectives got a saved value.
  size_t handed_back() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  void* outer_;
};

// While alive: collectives are neither recorded nor handed back (a nested loop's body: traced
// once and replayed from its recording, its results change under the recorded handles).
class CollectivesUnsaved {
 public:
  CollectivesUnsaved();
  ~CollectivesUnsaved();
  CollectivesUnsaved(const CollectivesUnsaved&) = delete;
  CollectivesUnsaved& operator=(const CollectivesUnsaved&) = delete;

 private:
  void* outer_;
};

// Whether a recorder or a replay is active (collective sites build their key only then).
bool saving_collectives();
// A collective's key: its kind, the operand's and the result's types and layouts, and the rule
// and source line in force.
std::string collective_key(const std::string& kind, const exec::ShardedValue& operand,
                           const exec::ShardedValue& result);
// The key of a product (dot_general) whose result the same mechanism saves: a matmul is most of
// a layer's forward compute, which the backward pass would otherwise run again.
std::string product_key(const exec::ShardedValue& a, const exec::ShardedValue& b, bool trans_a,
                        bool trans_b, const exec::ShardedValue& result);
// Under a replay: the recorded result's buffers for the collective of `key` whose result is
// laid out as `result` (shape, dtype, sharding), if the next recorded one matches.
std::optional<collectives::Buffers> saved_result(const std::string& key,
                                                 const exec::ShardedValue& result);
// Under a recorder: records the collective's result.
void record_result(const std::string& key, const Array& result);

// exec::reshard, recorded or handed back as above where it moves data between devices. The
// result, as an Array for the recording, is `committed` and `varying` as the caller makes it.
exec::ShardedValue reshard_saving(const std::shared_ptr<RuntimeState>& rt,
                                  const exec::ShardedValue& value, const Sharding& target,
                                  bool on_every_process, bool committed,
                                  const std::vector<std::string>& varying);

}  // namespace meshvk::detail
