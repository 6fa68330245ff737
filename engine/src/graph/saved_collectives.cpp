// Scan's saved collective results: see saved_collectives.hpp.
#include "graph/saved_collectives.hpp"

namespace meshvk::detail {

namespace {

enum class Mode { record, replay, off };

struct Active {
  Mode mode = Mode::off;
  std::vector<std::string>* keys = nullptr;
  std::vector<Array>* values = nullptr;
  size_t* next = nullptr;  // replay: the next recorded collective
  bool* diverged = nullptr;
};

// Per thread: the scope in force (scopes nest; each restores the one it replaced).
thread_local Active* active = nullptr;

std::string layout_text(const exec::ShardedValue& v) {
  return std::string(dtype_name(v.dtype)) + shape_to_string(v.shape) + " " + v.sharding.to_string();
}

}  // namespace

struct CollectiveRecorder::State {
  std::vector<std::string> keys;
  std::vector<Array> values;
  Active scope;
};

CollectiveRecorder::CollectiveRecorder() : state_(std::make_shared<State>()), outer_(active) {
  state_->scope = Active{Mode::record, &state_->keys, &state_->values, nullptr, nullptr};
  active = &state_->scope;
}
CollectiveRecorder::~CollectiveRecorder() {
  active = static_cast<Active*>(outer_);
}
const std::vector<std::string>& CollectiveRecorder::keys() const {
  return state_->keys;
}
const std::vector<Array>& CollectiveRecorder::values() const {
  return state_->values;
}

struct CollectiveReplay::State {
  std::vector<std::string> keys;
  std::vector<Array> values;
  size_t next = 0;
  bool diverged = false;
  Active scope;
};

CollectiveReplay::CollectiveReplay(std::vector<std::string> keys, std::vector<Array> values)
    : state_(std::make_shared<State>()), outer_(active) {
  state_->keys = std::move(keys);
  state_->values = std::move(values);
  state_->scope =
      Active{Mode::replay, &state_->keys, &state_->values, &state_->next, &state_->diverged};
  active = &state_->scope;
}
CollectiveReplay::~CollectiveReplay() {
  active = static_cast<Active*>(outer_);
}
size_t CollectiveReplay::handed_back() const {
  return state_->diverged ? 0 : state_->next;
}

CollectivesUnsaved::CollectivesUnsaved() : outer_(active) {
  thread_local Active off;
  active = &off;
}
CollectivesUnsaved::~CollectivesUnsaved() {
  active = static_cast<Active*>(outer_);
}

bool saving_collectives() {
  return active && active->mode != Mode::off;
}

std::string collective_key(const std::string& kind, const exec::ShardedValue& operand,
                           const exec::ShardedValue& result) {
  const exec::CallSite& site = exec::current_call_site();
  return kind + " | " + layout_text(operand) + " -> " + layout_text(result) + " | " +
         exec::current_rule() + " | " + (site.file ? site.file : "") + ":" +
         std::to_string(site.line);
}

std::string product_key(const exec::ShardedValue& a, const exec::ShardedValue& b, bool trans_a,
                        bool trans_b, const exec::ShardedValue& result) {
  return collective_key(std::string("dot_general") + (trans_a ? " T" : "") + (trans_b ? " T" : "") +
                            " with " + layout_text(b),
                        a, result);
}

std::optional<collectives::Buffers> saved_result(const std::string& key,
                                                 const exec::ShardedValue& result) {
  if (!active || active->mode != Mode::replay || *active->diverged) return std::nullopt;
  const size_t k = *active->next;
  if (k >= active->keys->size() || (*active->keys)[k] != key) {
    *active->diverged = true;  // from here on everything runs as it would
    return std::nullopt;
  }
  const Array& saved = (*active->values)[k];
  const exec::ShardedValue& v = materialized(saved);
  if (v.shape != result.shape || v.dtype != result.dtype ||
      !v.sharding.is_equivalent_to(result.sharding, result.shape.size()) ||
      v.sharding.device_ids() != result.sharding.device_ids()) {
    *active->diverged = true;
    return std::nullopt;
  }
  ++*active->next;
  if (exec::logging())
    exec::log_op(key.substr(0, key.find(" | ")) + ": the scan's forward pass's result, saved for its backward pass " +
                 (key.rfind("dot_general", 0) == 0 ? "(nothing computed)" : "(nothing sent)"));
  return v.shards;
}

void record_result(const std::string& key, const Array& result) {
  if (!active || active->mode != Mode::record) return;
  active->keys->push_back(key);
  active->values->push_back(result);
}

exec::ShardedValue reshard_saving(const std::shared_ptr<RuntimeState>& rt,
                                  const exec::ShardedValue& value, const Sharding& target,
                                  bool on_every_process, bool committed,
                                  const std::vector<std::string>& varying) {
  // A replicated value laid out anew on its own devices moves nothing between them.
  const bool communicates =
      !(value.sharding.is_fully_replicated() && value.sharding.device_ids() == target.device_ids());
  if (!communicates || !saving_collectives())
    return exec::reshard(*rt, value, target, on_every_process);
  const exec::ShardedValue like{value.shape, value.dtype, target, {}};
  const std::string key = collective_key("reshard", value, like);
  if (std::optional<collectives::Buffers> saved = saved_result(key, like))
    return {value.shape, value.dtype, target, *saved};
  exec::ShardedValue out = exec::reshard(*rt, value, target, on_every_process);
  record_result(key, make_array(rt, out, committed, varying));
  return out;
}

}  // namespace meshvk::detail
