#pragma once
// Runs scenarios on a worker thread that owns the meshvk Runtime and every Array a scenario
// publishes. The UI thread never touches meshvk state: it sends commands (run, pause, step,
// stop, a heat map) and copies a snapshot of plain data each frame.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scenario.hpp"

namespace inspector {

struct ArrayInfo {
  std::string name;
  meshvk::Shape shape;
  meshvk::DType dtype = meshvk::DType::float32;
  std::optional<meshvk::Sharding> sharding;
  std::string type;  // jax.typeof
  bool committed = false;
  uint64_t version = 0;  // changes when the scenario publishes the name again
};

struct InputInfo {
  std::string name;
  meshvk::PartitionSpec default_spec;
  std::optional<meshvk::Mesh> mesh;
};

struct ProgramInfo {
  std::string name;
  std::string text;
  // Lowered::memory_analysis's peak per device (device id, bytes), for programs published as a
  // Lowered; empty for the others (shard_map's, text-only ones).
  std::vector<std::pair<int, uint64_t>> peak_per_device;
};
// The program's peak on `device`, or -1 when it says none.
int64_t peak_memory_on(const ProgramInfo& program, int device);

// Values of one 2-D slice of an array, block-averaged down to at most kMaxHeat per side.
struct HeatMap {
  static constexpr int kMaxHeat = 256;
  std::string array;
  uint64_t version = 0;
  int slice = 0;
  int rows = 0, cols = 0;
  std::vector<float> values;
  float min = 0, max = 0;
  std::string error;
};

// The name the program view gives a shard_map's program: the user's function, as JAX names
// shard_map(f): "shard_map(collective_matmul)", from the call site its first collective line
// records ("  # rule - file.cpp:80 (collective_matmul)"); a lambda is "shard_map(lambda at
// file.cpp:80)". "" when no line says (a body without collectives).
std::string shard_map_program_name(const std::string& text);

enum class RunState { starting, idle, running, paused, finished, failed, stopped };
const char* run_state_name(RunState state);

struct RunnerSnapshot {
  uint64_t run = 0;  // counts runs, so views can drop what an earlier run showed
  RunState state = RunState::starting;
  std::string scenario;
  std::string message;     // the error, or "exit code N"
  std::string checkpoint;  // the last checkpoint passed
  int checkpoints = 0;
  std::vector<ArrayInfo> arrays;  // in first-publish order
  std::string last_published;     // the array the scenario published last, and how many
  uint64_t publishes = 0;         // publishes this run has made
  std::vector<ProgramInfo> programs;
  std::vector<InputInfo> inputs;
  std::vector<meshvk::DeviceInfo> devices;
  std::string adapter, platform;
  uint64_t validation_messages = 0;
  bool validation_enabled = false;
  std::string console;  // the scenario's output
  HeatMap heat;
};

struct RunRequest {
  std::string scenario;
  std::vector<std::string> args;
  std::optional<meshvk::scenarios::MeshOverride> mesh;
  std::map<std::string, meshvk::PartitionSpec> specs;
  bool paused = false;  // stop at the first checkpoint
};

class ScenarioRunner : private meshvk::scenarios::Observer {
 public:
  explicit ScenarioRunner(int num_devices);
  ~ScenarioRunner() override;
  ScenarioRunner(const ScenarioRunner&) = delete;
  ScenarioRunner& operator=(const ScenarioRunner&) = delete;

  // Stops whatever runs (at its next checkpoint) and runs this instead.
  void run(RunRequest request);
  void pause();
  void resume();
  void step();  // runs to the next checkpoint, then pauses
  void stop();
  void request_heat_map(const std::string& array, int slice);
  // Called (on the runner's thread, under its lock) whenever the snapshot changes: the window
  // uses it to wake up and draw instead of polling.
  void set_on_change(std::function<void()> on_change);

  // Copies the state into `out` when it changed since `version`; returns whether it did.
  bool snapshot(RunnerSnapshot& out, uint64_t& version) const;
  // Blocks until the runtime exists (or failed), so the first frame has devices to show.
  void wait_started() const;

 private:
  void on_array(const std::string& name, const meshvk::Array& array) override;
  void on_program(const std::string& name, const std::string& text) override;
  void on_program_memory(const std::string& name, const meshvk::MemoryAnalysis& memory) override;
  void on_input(const std::string& name, const meshvk::PartitionSpec& default_spec,
                const meshvk::Mesh& mesh) override;
  bool on_checkpoint(const std::string& label) override;

  void thread_main(int num_devices);
  void run_one(const RunRequest& request);
  void serve_heat_map();  // worker thread, without the lock
  void refresh_devices_locked();
  void changed_locked() {
    ++version_;
    if (on_change_) on_change_();
  }
  std::function<void()> on_change_;

  class Console;
  std::unique_ptr<Console> console_;

  mutable std::mutex mutex_;
  mutable std::condition_variable wake_;
  RunnerSnapshot state_;
  uint64_t version_ = 1;
  std::optional<RunRequest> pending_;
  std::optional<std::pair<std::string, int>> heat_request_;
  bool paused_ = false;
  bool step_ = false;
  bool quit_ = false;
  std::atomic<bool> stop_{false};

  // Worker-thread only: the arrays themselves, kept alive for heat maps.
  std::map<std::string, meshvk::Array> live_arrays_;
  std::thread thread_;
};

}  // namespace inspector
