#pragma once
// Everything a meshvk user needs: #include <meshvk/meshvk.hpp>
#include "meshvk/array.hpp"
#include "meshvk/dtype.hpp"
#include "meshvk/error.hpp"
#include "meshvk/jit.hpp"
#include "meshvk/mesh.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/partition_spec.hpp"
#include "meshvk/random.hpp"
#include "meshvk/runtime.hpp"
#include "meshvk/shard_map.hpp"
#include "meshvk/sharding.hpp"
#include "meshvk/visualize.hpp"
