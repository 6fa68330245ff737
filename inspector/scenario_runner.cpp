#include "scenario_runner.hpp"

#include <algorithm>
#include <ostream>
#include <streambuf>

#include <meshvk/shard_map_watch.hpp>

namespace inspector {

namespace mv = meshvk;
namespace sc = meshvk::scenarios;

std::string shard_map_program_name(const std::string& text) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    const size_t hash = line.find("  # ");
    const size_t dash = line.rfind(" - ");
    if (hash == std::string::npos || dash == std::string::npos || dash < hash) continue;
    std::string site = line.substr(dash + 3);  // "file.cpp:80 (function) [backward]"
    if (const size_t b = site.find(" [backward]"); b != std::string::npos) site.erase(b);
    const size_t open = site.find(" (");
    if (open == std::string::npos || site.back() != ')') continue;
    const std::string where = site.substr(0, open);
    std::string function = site.substr(open + 2, site.size() - open - 3);
    // __builtin_FUNCTION in a lambda's body is "operator()", cut to "operator".
    if (function.empty() || function == "operator" || function.find(" lambda") != std::string::npos)
      return "shard_map(lambda at " + where + ")";
    return "shard_map(" + function + ")";
  }
  return "";
}

const char* run_state_name(RunState state) {
  switch (state) {
    case RunState::starting:
      return "starting";
    case RunState::idle:
      return "idle";
    case RunState::running:
      return "running";
    case RunState::paused:
      return "paused";
    case RunState::finished:
      return "finished";
    case RunState::failed:
      return "failed";
    case RunState::stopped:
      return "stopped";
  }
  return "?";
}

// The scenario's std::ostream: appends to the snapshot's console under the runner's lock,
// keeping the last kKeep bytes.
class ScenarioRunner::Console : public std::streambuf {
 public:
  explicit Console(ScenarioRunner& runner) : runner_(runner), stream_(this) {}
  std::ostream& stream() { return stream_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    const char ch = static_cast<char>(c);
    append(&ch, 1);
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  static constexpr size_t kKeep = size_t{1} << 20;
  void append(const char* s, size_t n) {
    std::lock_guard lock(runner_.mutex_);
    std::string& text = runner_.state_.console;
    text.append(s, n);
    if (text.size() > 2 * kKeep) text.erase(0, text.size() - kKeep);
    runner_.changed_locked();
  }
  ScenarioRunner& runner_;
  std::ostream stream_;
};

ScenarioRunner::ScenarioRunner(int num_devices) : console_(std::make_unique<Console>(*this)) {
  thread_ = std::thread([this, num_devices] { thread_main(num_devices); });
}

ScenarioRunner::~ScenarioRunner() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
    pending_.reset();
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ScenarioRunner::run(RunRequest request) {
  {
    std::lock_guard lock(mutex_);
    pending_ = std::move(request);
    stop_ = true;
  }
  wake_.notify_all();
}

void ScenarioRunner::pause() {
  std::lock_guard lock(mutex_);
  paused_ = true;
}

void ScenarioRunner::resume() {
  {
    std::lock_guard lock(mutex_);
    paused_ = false;
    step_ = false;
  }
  wake_.notify_all();
}

void ScenarioRunner::step() {
  {
    std::lock_guard lock(mutex_);
    paused_ = false;
    step_ = true;
  }
  wake_.notify_all();
}

void ScenarioRunner::set_on_change(std::function<void()> on_change) {
  std::lock_guard lock(mutex_);
  on_change_ = std::move(on_change);
}

void ScenarioRunner::stop() {
  {
    // Under the lock, so a worker between testing stop_ and waiting cannot miss the wake-up.
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
}

void ScenarioRunner::request_heat_map(const std::string& array, int slice) {
  {
    std::lock_guard lock(mutex_);
    heat_request_ = {array, slice};
  }
  wake_.notify_all();
}

bool ScenarioRunner::snapshot(RunnerSnapshot& out, uint64_t& version) const {
  std::lock_guard lock(mutex_);
  if (version == version_) return false;
  out = state_;
  version = version_;
  return true;
}

void ScenarioRunner::wait_started() const {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return state_.state != RunState::starting; });
}

void ScenarioRunner::refresh_devices_locked() {
  // Called on the worker thread, which owns the runtime.
  state_.devices = mv::devices();
  const mv::Runtime& rt = mv::Runtime::current();
  state_.validation_messages = rt.validation_messages();
  state_.validation_enabled = rt.validation_enabled();
  changed_locked();
}

void ScenarioRunner::thread_main(int num_devices) {
  std::optional<mv::Runtime> runtime;
  try {
    runtime.emplace(mv::RuntimeOptions{.num_devices = num_devices});
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex_);
    state_.state = RunState::failed;
    state_.message = std::string("cannot start the runtime: ") + e.what();
    changed_locked();
    wake_.notify_all();
    return;
  }
  {
    std::lock_guard lock(mutex_);
    state_.state = RunState::idle;
    state_.adapter = runtime->adapter_name();
    state_.platform = runtime->platform();
    refresh_devices_locked();
  }
  wake_.notify_all();
  for (;;) {
    std::optional<RunRequest> request;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || pending_ || heat_request_; });
      if (quit_) break;
      request = std::move(pending_);
      pending_.reset();
    }
    if (request) run_one(*request);
    serve_heat_map();
  }
  // Arrays before the runtime: they return their memory to its pools.
  live_arrays_.clear();
}

void ScenarioRunner::run_one(const RunRequest& request) {
  live_arrays_.clear();
  {
    std::lock_guard lock(mutex_);
    const uint64_t run = state_.run + 1;
    const std::string adapter = state_.adapter, platform = state_.platform;
    const auto devices = state_.devices;
    state_ = RunnerSnapshot{};
    state_.run = run;
    state_.adapter = adapter;
    state_.platform = platform;
    state_.devices = devices;
    state_.scenario = request.scenario;
    state_.state = request.paused ? RunState::paused : RunState::running;
    paused_ = request.paused;
    step_ = false;
    stop_ = false;
    changed_locked();
  }
  const sc::Scenario* scenario = sc::find(request.scenario);
  RunState end = RunState::finished;
  std::string message;
  if (!scenario) {
    end = RunState::failed;
    message = "no scenario named " + request.scenario;
  } else {
    sc::ScenarioContext ctx;
    ctx.args = request.args;
    ctx.out = &console_->stream();
    ctx.err = &console_->stream();
    ctx.viz.use_color = false;
    ctx.mesh_override = request.mesh;
    ctx.spec_overrides = request.specs;
    ctx.stop = &stop_;
    ctx.observer = this;
    // shard_map calls publish no program of their own: the watch shows each distinct one in
    // the program view, named by the user's function (shard_map_program_name), else
    // "shard_map 1", "shard_map 2", ... (under jit too). A name already taken by another
    // program gets " #2", " #3", ...
    int shard_maps = 0;
    const mv::ShardMapWatch watch([&](const std::string& text) {
      std::string name = shard_map_program_name(text);
      {
        std::lock_guard lock(mutex_);
        for (const ProgramInfo& p : state_.programs)
          if (p.text == text) return;
        ++shard_maps;
        if (name.empty()) name = "shard_map " + std::to_string(shard_maps);
        const auto taken = [&](const std::string& n) {
          for (const ProgramInfo& p : state_.programs)
            if (p.name == n) return true;
          return false;
        };
        if (taken(name)) {
          int k = 2;
          while (taken(name + " #" + std::to_string(k))) ++k;
          name += " #" + std::to_string(k);
        }
      }
      on_program(name, text);
    });
    try {
      const int rc = scenario->run(ctx);
      message = "exit code " + std::to_string(rc);
      if (rc != 0) end = RunState::failed;
    } catch (const sc::Stopped&) {
      end = RunState::stopped;
      message = "stopped";
    } catch (const std::exception& e) {
      end = RunState::failed;
      message = e.what();
    }
    console_->stream().flush();
    try {
      mv::Runtime::current().synchronize();
    } catch (const std::exception& e) {
      message += std::string("; synchronize: ") + e.what();
    }
  }
  std::lock_guard lock(mutex_);
  state_.state = end;
  state_.message = message;
  refresh_devices_locked();
}

void ScenarioRunner::on_array(const std::string& name, const mv::Array& array) {
  if (!array.valid()) return;
  ArrayInfo info;
  info.name = name;
  info.shape = array.shape();
  info.dtype = array.dtype();
  info.sharding = array.sharding();
  info.type = mv::type_of(array);
  info.committed = array.committed();
  live_arrays_.insert_or_assign(name, array);
  std::lock_guard lock(mutex_);
  auto& arrays = state_.arrays;
  state_.last_published = name;
  ++state_.publishes;
  auto it = std::find_if(arrays.begin(), arrays.end(),
                         [&](const ArrayInfo& a) { return a.name == name; });
  if (it == arrays.end()) {
    info.version = 1;
    arrays.push_back(std::move(info));
  } else {
    info.version = it->version + 1;
    *it = std::move(info);
  }
  changed_locked();
}

void ScenarioRunner::on_program(const std::string& name, const std::string& text) {
  std::lock_guard lock(mutex_);
  for (ProgramInfo& p : state_.programs) {
    if (p.name == name) {
      p.text = text;
      changed_locked();
      return;
    }
  }
  state_.programs.push_back({name, text});
  changed_locked();
}

void ScenarioRunner::on_program_memory(const std::string& name, const mv::MemoryAnalysis& memory) {
  std::lock_guard lock(mutex_);
  for (ProgramInfo& p : state_.programs) {
    if (p.name != name) continue;
    p.peak_per_device.clear();
    for (const mv::DeviceMemory& d : memory.devices)
      p.peak_per_device.emplace_back(d.device, d.peak_memory_in_bytes);
    changed_locked();
    return;
  }
}

int64_t peak_memory_on(const ProgramInfo& program, int device) {
  for (const auto& [d, bytes] : program.peak_per_device)
    if (d == device) return static_cast<int64_t>(bytes);
  return -1;
}

void ScenarioRunner::on_input(const std::string& name, const mv::PartitionSpec& default_spec,
                              const mv::Mesh& mesh) {
  std::lock_guard lock(mutex_);
  for (InputInfo& in : state_.inputs) {
    if (in.name == name) {
      in.default_spec = default_spec;
      in.mesh = mesh;
      changed_locked();
      return;
    }
  }
  state_.inputs.push_back({name, default_spec, mesh});
  changed_locked();
}

bool ScenarioRunner::on_checkpoint(const std::string& label) {
  {
    std::lock_guard lock(mutex_);
    state_.checkpoint = label;
    state_.checkpoints += 1;
    if (step_) {
      paused_ = true;
      step_ = false;
    }
    refresh_devices_locked();
  }
  for (;;) {
    serve_heat_map();
    std::unique_lock lock(mutex_);
    if (stop_ || quit_) return false;
    if (!paused_) {
      if (state_.state != RunState::running) {
        state_.state = RunState::running;
        changed_locked();
      }
      return true;
    }
    if (state_.state != RunState::paused) {
      state_.state = RunState::paused;
      changed_locked();
    }
    wake_.wait(lock, [&] { return stop_ || quit_ || !paused_ || heat_request_.has_value(); });
  }
}

void ScenarioRunner::serve_heat_map() {
  std::optional<std::pair<std::string, int>> request;
  {
    std::lock_guard lock(mutex_);
    request = std::move(heat_request_);
    heat_request_.reset();
  }
  if (!request) return;
  HeatMap heat;
  heat.array = request->first;
  heat.slice = request->second;
  const auto it = live_arrays_.find(request->first);
  if (it == live_arrays_.end()) {
    heat.error = "the array is no longer live";
  } else {
    const mv::Array& a = it->second;
    const mv::Shape& shape = a.shape();
    const int64_t rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
    const int64_t cols = shape.empty() ? 1 : shape.back();
    const int64_t slices = rows * cols > 0 ? a.size() / (rows * cols) : 0;
    constexpr int64_t kMaxElements = int64_t{1} << 26;
    if (a.size() > kMaxElements) {
      heat.error = "too large for a heat map (" + std::to_string(a.size()) + " elements)";
    } else if (a.size() == 0) {
      heat.error = "the array is empty";
    } else {
      try {
        std::vector<float> values;
        if (a.dtype() == mv::DType::float32) {
          values = a.to_host<float>();
        } else {
          const auto ints = a.to_host<int32_t>();
          values.assign(ints.begin(), ints.end());
        }
        const int64_t slice = std::clamp<int64_t>(heat.slice, 0, slices - 1);
        heat.slice = static_cast<int>(slice);
        const float* base = values.data() + slice * rows * cols;
        const int64_t out_rows = std::min<int64_t>(rows, HeatMap::kMaxHeat);
        const int64_t out_cols = std::min<int64_t>(cols, HeatMap::kMaxHeat);
        heat.rows = static_cast<int>(out_rows);
        heat.cols = static_cast<int>(out_cols);
        heat.values.assign(static_cast<size_t>(out_rows * out_cols), 0.f);
        std::vector<int> counts(heat.values.size(), 0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const size_t o =
                static_cast<size_t>((r * out_rows / rows) * out_cols + c * out_cols / cols);
            heat.values[o] += base[r * cols + c];
            counts[o] += 1;
          }
        for (size_t i = 0; i < heat.values.size(); ++i)
          if (counts[i]) heat.values[i] /= static_cast<float>(counts[i]);
        const auto [lo, hi] = std::minmax_element(heat.values.begin(), heat.values.end());
        heat.min = *lo;
        heat.max = *hi;
      } catch (const std::exception& e) {
        heat.error = e.what();
      }
    }
  }
  std::lock_guard lock(mutex_);
  for (const ArrayInfo& info : state_.arrays)
    if (info.name == heat.array) heat.version = info.version;
  state_.heat = std::move(heat);
  changed_locked();
}

}  // namespace inspector
