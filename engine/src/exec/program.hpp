#pragma once
// A compiled per-device program: the command buffers a jit trace recorded on every virtual
// device, with the semaphore dependencies between them, replayed on later calls with new inputs.
#include <memory>
#include <vector>

#include "exec/sharded_value.hpp"
#include "runtime/runtime_state.hpp"

namespace meshvk::exec {

class Program {
 public:
  // `inputs` are the program's own buffers; `fed` what they were copied from for the trace.
  Program(std::shared_ptr<detail::RuntimeState> rt, std::unique_ptr<detail::Capture> capture,
          std::vector<ShardedValue> inputs, std::vector<ShardedValue> outputs,
          const std::vector<ShardedValue>& fed = {});
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Runs the program on `inputs` (laid out exactly as the traced ones). The outputs are the
  // program's own buffers, overwritten by the next replay: callers that keep a result past that
  // must copy it first (graph/jit.cpp does, only for results still referenced).
  std::vector<ShardedValue> replay(const std::vector<ShardedValue>& inputs);
  const std::vector<ShardedValue>& outputs() const { return outputs_; }

  size_t submissions() const { return capture_->submissions.size(); }

 private:
  std::shared_ptr<detail::RuntimeState> rt_;
  std::unique_ptr<detail::Capture> capture_;
  std::vector<ShardedValue> inputs_, outputs_;
  std::vector<detail::Fence> last_replay_;  // per timeline: where the previous replay ended
  std::vector<std::vector<detail::Fence>> output_written_;  // traced fence that wrote each output piece
  // Per input piece, the buffer last copied into it and the write it held then: a replay given
  // the same buffer, unchanged since (values are immutable until rewritten), skips the copy.
  struct Fed {
    std::weak_ptr<detail::DeviceBuffer> source;
    detail::Fence written;
  };
  std::vector<std::vector<Fed>> fed_;
};

}  // namespace meshvk::exec
