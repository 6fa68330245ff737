#include "graph/constant_remake.hpp"

#include <mutex>

#include "exec/program_log.hpp"
#include "meshvk/error.hpp"

namespace meshvk::detail {

Array with_remake(const Array& x, Remake remake) {
  auto impl = std::make_shared<ArrayImpl>(*x.impl());
  impl->remake = std::make_shared<const Remake>(std::move(remake));
  return Array(std::shared_ptr<const ArrayImpl>(std::move(impl)));
}

std::shared_ptr<const Remake> remake_of(const Array& x) {
  if (!x.valid() || x.impl()->committed || !x.impl()->donated_to.empty()) return nullptr;
  return x.impl()->remake;
}

namespace {
// The same devices as `target`, each with the whole value: P() on a NamedSharding's mesh, or the
// single device itself.
std::optional<Sharding> replicated_like(const Sharding& target) {
  if (const NamedSharding* n = target.named()) return Sharding(NamedSharding(n->mesh(), PartitionSpec()));
  if (target.single()) return target;
  return std::nullopt;
}
}  // namespace

std::optional<exec::ShardedValue> remade_on(const Array& x, const Sharding& target) {
  const std::shared_ptr<const Remake> remake = remake_of(x);
  if (!remake) return std::nullopt;
  const std::vector<int> devices = target.device_ids();
  bool elsewhere = false;
  for (const int d : devices) elsewhere = elsewhere || d != x.sharding().device_ids().front();
  if (!elsewhere || x.sharding().device_ids().size() != 1) return std::nullopt;
  const std::optional<Sharding> everywhere = replicated_like(target);
  if (!everywhere) return std::nullopt;
  RuntimeState& rt = *x.impl()->runtime;
  std::lock_guard lock(rt.mutex());
  const Array made = (*remake)(*everywhere);
  exec::ShardedValue v = materialized(made);
  if (exec::logging())
    exec::log_op("constant " + std::string(dtype_name(v.dtype)) + shape_to_string(v.shape) + ": made on each of " + std::to_string(devices.size()) +
                 " devices, not copied from device " + std::to_string(x.sharding().device_ids().front()));
  // A split target: each device keeps its own box of its whole copy (copies within the device).
  if (!target.is_equivalent_to(*everywhere, v.shape.size())) v = exec::reshard(rt, v, target);
  return v;
}

exec::ShardedValue iota_on(RuntimeState& rt, int64_t count, DType dtype, double start, double step,
                           const Sharding& replicated) {
  if (replicated.single()) return exec::iota(rt, count, dtype, start, step, replicated);
  exec::ShardedValue value{Shape{count}, dtype, replicated, {}};
  for (const int d : replicated.device_ids())
    value.shards.push_back(exec::iota(rt, count, dtype, start, step, SingleDeviceSharding(d, rt.platform())).shards.front());
  return value;
}

}  // namespace meshvk::detail
