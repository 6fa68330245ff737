#pragma once
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

// The text jax.debug.visualize_array_sharding prints for an array of `shape` laid out by
// `sharding`. Rank 1 and 2 match JAX exactly; rank 0 is one cell, and rank 3+ is a labelled grid
// of 2-D slices over the leading dimensions.
std::string visualize_sharding(const Shape& shape, const Sharding& sharding,
                               const VisualizeOptions& options = {});
std::string visualize_array_sharding(const Array& array, const VisualizeOptions& options = {});

}  // namespace meshvk
