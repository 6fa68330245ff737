#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "meshvk/dtype.hpp"
#include "meshvk/sharding.hpp"

namespace meshvk {

class Array;

struct VisualizeOptions {
  // 24-bit ANSI colours as JAX prints them; unset means MESHVK_COLOR=0|1, else on when stdout
  // is a terminal (under mpirun, where it is Open MPI's pseudo-terminal, off).
  std::optional<bool> use_color;
  double scale = 1.0;  // 0 to 1000
  int min_width = 9;   // 0 to 10000 columns per cell
  int max_width = 80;  // 1 to 10000
};

// The most characters a picture may hold: its lines times its width (before max_width crops
// it), over every slice of a rank 3+ array, and at least one per cell. Drawing costs time and
// memory in proportion (in colour, each cell's line also carries its escape codes). A request
// for more (scale 100 with 10000-column cells drew 164 MB) is an Error naming the size it would
// be; a smaller scale, max_width or min_width makes it fit. 1,000,000 is 1000 lines of 1000
// columns, and holds scale 1000 at the default max_width (80).
inline constexpr int64_t kVisualizeMaxCharacters = 1'000'000;

// The text jax.debug.visualize_array_sharding prints for an array of `shape` laid out by
// `sharding`. Rank 1 and 2 match JAX exactly; rank 0 is one cell, and rank 3+ is a labelled grid
// of 2-D slices over the leading dimensions. Throws Error for a picture larger than
// kVisualizeMaxCharacters.
std::string visualize_sharding(const Shape& shape, const Sharding& sharding,
                               const VisualizeOptions& options = {});
std::string visualize_array_sharding(const Array& array, const VisualizeOptions& options = {});

// jax.debug.inspect_array_sharding(x, callback=...): calls `callback` with x's sharding. Outside
// jit it is called at once; inside jit it is called while the function is traced (once per
// trace: a cached call replays the recorded program and calls nothing), with the sharding the
// propagation gave x there; inside a shard_map body with the per-device value's sharding (over
// the shard_map's mesh, its manual axes typed AxisType::Manual: P() for a fully manual body,
// the automatic axes' layout with shard_map's axis_names). An empty x or callback is an Error.
void inspect_array_sharding(const Array& x, const std::function<void(const Sharding&)>& callback);

// JAX's jax.debug spellings.
namespace debug {
using meshvk::inspect_array_sharding;
using meshvk::visualize_array_sharding;
}  // namespace debug

}  // namespace meshvk
