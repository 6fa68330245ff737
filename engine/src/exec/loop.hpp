#pragma once
// A loop's body as the device runs it: the command buffers one trace of the body recorded, and
// for every further iteration the carried outputs copied into the inputs and the same command
// buffers submitted again. Nothing is recorded per iteration, so a loop of 48 steps is the
// program of one (lax.scan in graph/scan.cpp, lax.fori_loop and lax.while_loop in graph/control_flow.cpp).
#include <deque>
#include <memory>
#include <vector>

#include "exec/sharded_value.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::exec {

class LoopBody {
 public:
  // `capture` holds the body's first iteration, which ran while it was traced: it read `inputs`
  // (the loop's own buffers) and wrote `outputs`. outputs[i] is carried into inputs[i] for
  // i < carried (same shape, dtype and sharding); the rest of the outputs are per-iteration
  // results, valid until the next iterate(). One process only (graph/traced_loop.hpp unrolls
  // the loop across processes).
  LoopBody(std::shared_ptr<detail::RuntimeState> rt, std::unique_ptr<detail::Capture> capture,
           std::vector<ShardedValue> inputs, std::vector<ShardedValue> outputs, size_t carried);
  ~LoopBody();
  LoopBody(const LoopBody&) = delete;
  LoopBody& operator=(const LoopBody&) = delete;

  // One more iteration on the device: the carried outputs into the inputs, then the body.
  void iterate();
  const std::vector<ShardedValue>& outputs() const { return outputs_; }
  // Command buffers the body recorded (its size as a program; independent of the trip count).
  size_t recorded() const;

 private:
  void feed_back(const std::vector<uint64_t>& after, std::vector<detail::Fence>& fed);

  std::shared_ptr<detail::RuntimeState> rt_;
  std::unique_ptr<detail::Capture> body_;
  // The copies of the carried values, recorded at the first iterate(), one submission per device.
  std::unique_ptr<detail::Capture> feedback_;
  std::vector<ShardedValue> inputs_, outputs_;
  size_t carried_;
  std::vector<int> devices_;                            // where the body or its values live
  std::vector<uint64_t> last_;                          // per timeline: the last iteration's end
  // Outside a trace: the ends of the latest iterations, so the host stays at most
  // kAhead iterations ahead of the device (a queue that grows without bound slows the driver
  // and the validation layer down with every submission).
  std::deque<std::vector<uint64_t>> ahead_;
  static constexpr size_t kAhead = 32;
  std::vector<std::vector<detail::Fence>> output_written_;  // traced fence that wrote each piece
};

// Writes src's pieces into dst's buffers (the same sharding, shape and dtype), after every use
// of them: a loop's buffers given new values before it runs again.
void overwrite(detail::RuntimeState& rt, const ShardedValue& dst, const ShardedValue& src);

}  // namespace meshvk::exec
