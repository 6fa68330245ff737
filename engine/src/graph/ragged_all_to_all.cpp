// jax.lax.ragged_all_to_all inside shard_map, composed of meshvk's ops: each slice to send is
// taken into a padded (K, N, ...) block, one tiled all_to_all moves the blocks, and the rows
// received are written into `output` with at_set. Everything runs on the devices with the sizes
// and offsets as device values, so a jitted program replays it with new ones.
#include <cstdint>
#include <string>

#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/shard_map.hpp"

namespace meshvk {

namespace {

void check_index_array(const Array& a, const char* name) {
  if (!a.valid()) throw Error(std::string("ragged_all_to_all: ") + name + " is an empty meshvk::Array");
  if (a.dtype() != DType::int32)
    throw Error(std::string("ragged_all_to_all: ") + name + " is " + std::string(dtype_name(a.dtype())) +
                "; offsets and sizes are int32 arrays (astype(x, DType::int32))");
  if (a.ndim() != 1)
    throw Error(std::string("ragged_all_to_all: ") + name + " has shape " + shape_to_string(a.shape()) +
                "; offsets and sizes are 1-D arrays of one length K (a multiple of the axis size)");
}

std::string axes_list(const AxisNames& axes) {
  std::string s;
  for (const auto& a : axes.names) s += (s.empty() ? "'" : ", '") + a + "'";
  return s;
}

}  // namespace

Array ragged_all_to_all(const Array& operand, const Array& output, const Array& input_offsets, const Array& send_sizes,
                        const Array& output_offsets, const Array& recv_sizes, const AxisNames& axis_name) {
  if (!operand.valid() || !output.valid())
    throw Error("ragged_all_to_all: operand and output must be non-empty meshvk::Arrays");
  check_index_array(input_offsets, "input_offsets");
  check_index_array(send_sizes, "send_sizes");
  check_index_array(output_offsets, "output_offsets");
  check_index_array(recv_sizes, "recv_sizes");
  const int n = axis_size(axis_name);  // also checks the axes are bound (inside shard_map)
  const int64_t k = input_offsets.shape()[0];
  for (const Array* a : {&send_sizes, &output_offsets, &recv_sizes})
    if (a->shape()[0] != k)
      throw Error("ragged_all_to_all: input_offsets, send_sizes, output_offsets and recv_sizes must have one length; "
                  "got " + shape_to_string(input_offsets.shape()) + ", " + shape_to_string(send_sizes.shape()) + ", " +
                  shape_to_string(output_offsets.shape()) + ", " + shape_to_string(recv_sizes.shape()));
  if (k == 0 || k % n != 0)
    throw Error("ragged_all_to_all: the offsets and sizes have length " + std::to_string(k) +
                ", which must be a positive multiple of " + std::to_string(n) + ", the size of the group over " +
                axes_list(axis_name));
  if (operand.ndim() < 1 || output.ndim() != operand.ndim())
    throw Error("ragged_all_to_all: operand " + shape_to_string(operand.shape()) + " and output " +
                shape_to_string(output.shape()) + " must have the same rank, at least 1 (the ragged leading axis)");
  for (size_t d = 1; d < operand.ndim(); ++d)
    if (operand.shape()[d] != output.shape()[d])
      throw Error("ragged_all_to_all: operand " + shape_to_string(operand.shape()) + " and output " +
                  shape_to_string(output.shape()) + " differ past the leading (ragged) axis");
  if (operand.dtype() != output.dtype())
    throw Error("ragged_all_to_all: operand is " + std::string(dtype_name(operand.dtype())) + " but output is " +
                std::string(dtype_name(output.dtype())) + "; give them one dtype");
  const int64_t rows = operand.shape()[0];
  const int64_t m = output.shape()[0];
  if (rows == 0 || m == 0) return output;  // nothing can be sent, or nothing received
  if (rows > INT32_MAX || m > INT32_MAX) throw Error("ragged_all_to_all: the leading axis is past int32 indices");

  // The slices to send, each padded to `rows` rows: block[i, r] = operand[input_offsets[i] + r]
  // (clamped; rows past send_sizes[i] are never written by the receiver).
  const Array r = arange(static_cast<int32_t>(rows)).reshape(Shape{1, rows});
  const Array idx = input_offsets.reshape(Shape{k, 1}) + r;
  const Array block = take(operand, idx, 0, TakeMode::clip);  // (K, rows, ...)
  // Chunk j of K/n slices goes to member j; member i receives, in source order, the slices
  // addressed to it, and where the senders want them written.
  const Array received = all_to_all(block, axis_name, 0, 0, true);
  const Array offsets = all_to_all(output_offsets, axis_name, 0, 0, true);
  // Row r of received slice i lands at offsets[i] + r when r < recv_sizes[i]; others get the
  // index m, out of range, which at_set drops.
  const Array target = where(r < recv_sizes.reshape(Shape{k, 1}), offsets.reshape(Shape{k, 1}) + r, static_cast<int32_t>(m));
  Shape flat = operand.shape();
  flat[0] = k * rows;
  return at_set(output, target.reshape(Shape{k * rows}), received.reshape(flat));
}

}  // namespace meshvk
