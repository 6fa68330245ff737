#pragma once
// Several processes, one program (JAX's multi-controller model): every process runs the same
// program on its local virtual devices, and a mesh may span the devices of all of them. Open MPI
// launches the processes, tells them their rank and moves bytes between nodes; meshvk keeps every
// reduction in its own kernels, so results are bit-identical to a one-process run.
//
//   mpirun -np 2 -x MESHVK_NUM_DEVICES=4 ./my_program     # 8 devices, 4 per process
//
// A Runtime created under mpirun joins the job by itself (distributed::initialize is then
// implicit); devices() lists the devices of every process, process-major (process p holds
// p * local_device_count() ...), local_devices() those of this process. Joined that way, only
// process 0 writes to standard output unless MESHVK_ALL_RANKS_PRINT=1; after an explicit
// distributed::initialize() every process prints, as in JAX. Every process must run the same
// sequence of meshvk operations (as in JAX), including the ones that print.
//
// Reading an array that spans processes: a program that calls distributed::initialize() itself
// follows JAX, so to_host() raises JAX's error (use multihost::process_allgather) and
// Array::addressable_shards() lists this process's pieces; a program that does not (one written
// for one process, run unchanged under mpirun) reads such an array collectively and sees every
// piece. A process that dies, hangs or runs another program ends the job (MPI_Abort) with a
// message naming it, within MESHVK_WAIT_TIMEOUT_MS.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/runtime.hpp"
#include "meshvk/sharding.hpp"

namespace meshvk {

namespace distributed {

// jax.distributed.initialize. Rank and size come from Open MPI's environment (mpirun); given
// explicitly they must agree with it (an Error says what Open MPI reported). The coordinator
// address is accepted for JAX's signature: Open MPI already connects the processes.
struct InitializeOptions {
  std::string coordinator_address;
  std::optional<int> num_processes;
  std::optional<int> process_id;
};
void initialize(const InitializeOptions& options = {});
// Whether this process is part of a job of several processes (initialize ran, explicitly or by
// the first Runtime under mpirun).
bool is_initialized();

}  // namespace distributed

// jax.process_index() / jax.process_count(): 0 and 1 outside a multi-process job.
int process_index();
int process_count();
// jax.local_devices() / jax.local_device_count(): the current Runtime's devices in this process.
std::vector<DeviceInfo> local_devices();
int local_device_count();
// The process a device of the current Runtime belongs to.
int process_of(int device);

// jax.make_array_from_process_local_data: each process gives, row-major in `local_data` of
// `local_shape`, the part of the global array its local devices hold under `sharding`: the
// smallest box covering their pieces (JAX's per-process slice), whose shape must be
// `local_shape`. With one process it is device_put of the whole.
Array make_array_from_process_local_data(const Sharding& sharding,
                                         std::span<const float> local_data,
                                         const Shape& local_shape, const Shape& global_shape);

namespace multihost {
// jax.experimental.multihost_utils.process_allgather: the whole of `x` on the host of every
// process, row-major (an array that spans processes is read in pieces, each process contributing
// the pieces it holds). tiled=false with per-process values is not needed here: arrays are
// global. process_allgather(x) gives floats: float32, bfloat16, float16, int8, uint8 and bool
// exactly, int32 and uint32 as float values (rounded past 2^24); int64 and float64 would lose
// bits and are an Error. process_allgather<T>(x) gives x's own elements, T its host type
// (double, int64_t, int32_t, uint32_t, int8_t, uint8_t, bfloat16, float16, float), exactly.
namespace detail {
std::vector<float> process_allgather_floats(const Array& x);
void process_allgather_into(const Array& x, void* out, DType expected);
}  // namespace detail
template <class T = float>
std::vector<T> process_allgather(const Array& x) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::process_allgather_floats(x);
  } else {
    std::vector<T> out(static_cast<size_t>(x.valid() ? x.size() : 0));
    detail::process_allgather_into(x, out.data(), dtype_of<T>());
    return out;
  }
}
// jax.experimental.multihost_utils.sync_global_devices: returns once every process reached the
// barrier of this name; a different name on some process is an Error on all of them.
void sync_global_devices(const std::string& name);
}  // namespace multihost

}  // namespace meshvk
