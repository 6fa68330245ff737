#include "scaling_book.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace meshvk::programs {

namespace {

using Perm = std::vector<std::pair<int, int>>;

// ---- Helpers shared by the rings -------------------------------------------------------------

Array put(const Mesh& mesh, const Array& x, const PartitionSpec& spec) {
  return device_put(x, NamedSharding(mesh, spec));
}

// Every device of an n-ring sends to the one `step` places along it (-1: its left neighbour).
Perm ring_shift(int n, int step) {
  Perm perm;
  for (int j = 0; j < n; ++j) perm.emplace_back(j, ((j + step) % n + n) % n);
  return perm;
}

// The chunk index `offset` places along the ring from this device's `idx`, as a device scalar.
Array ring_chunk(const Array& idx, int offset, int n) {
  return (idx + (offset % n + n)) % n;
}

// lax.dynamic_slice_in_dim on rows or columns of a matrix, the start computed on the device
// (it depends on axis_index, which the host never sees inside shard_map).
Array rows_from(const Array& m, const Array& start, int64_t count) {
  return dynamic_slice(m, {start, scalar(int32_t{0})}, {count, m.shape()[1]});
}
Array cols_from(const Array& m, const Array& start, int64_t count) {
  return dynamic_slice(m, {scalar(int32_t{0}), start}, {m.shape()[0], count});
}

Array cols(const Array& m, int64_t start, int64_t stop) {
  return slice(m, {0, start}, {m.shape()[0], stop});
}

Array accumulate(const Array& accum, const Array& update) {
  return accum.valid() ? accum + update : update;
}

// ---- Local bodies of the collective matmuls (run inside shard_map over 'Y') ------------------

// lhs[b, k] is this device's chunk of the contracting dimension; rhs[n * k, f] holds every chunk.
// At step i the device holds device (idx + i)'s lhs chunk, multiplies it by the matching rows of
// rhs and passes it left. The permute is issued before the sum and reads only what the matmul
// reads, so a copy queue can move the next chunk while this one is multiplied.
Array allgather_lhs_ring(const Array& lhs, const Array& rhs) {
  const int n = axis_size("Y");
  const Array idx = axis_index("Y");
  const int64_t chunk = lhs.shape()[1];
  Array held = lhs, accum;
  for (int i = 0; i < n; ++i) {
    const Array update = matmul(held, rows_from(rhs, ring_chunk(idx, i, n) * chunk, chunk));
    if (i + 1 < n) held = ppermute(held, "Y", ring_shift(n, -1));
    accum = accumulate(accum, update);
  }
  return accum;
}

// The same ring run both ways: the first half of every lhs chunk travels left and the second half
// right, so each step moves half as many bytes over each direction of the links.
Array allgather_lhs_bidirectional(const Array& lhs, const Array& rhs) {
  const int n = axis_size("Y");
  const Array idx = axis_index("Y");
  const int64_t chunk = lhs.shape()[1], half = chunk / 2;
  if (chunk % 2 != 0)
    throw Error("collective_matmul_bidirectional: the local chunk of D (" + std::to_string(chunk) +
                ") must be even to split between the two directions");
  Array going_left = cols(lhs, 0, half), going_right = cols(lhs, half, chunk), accum;
  for (int i = 0; i < n; ++i) {
    // going_left now holds the first half of device (idx + i)'s chunk, going_right the second
    // half of device (idx - i)'s.
    const Array from_right =
        matmul(going_left, rows_from(rhs, ring_chunk(idx, i, n) * chunk, half));
    const Array from_left =
        matmul(going_right, rows_from(rhs, ring_chunk(idx, -i, n) * chunk + half, half));
    if (i + 1 < n) {
      going_left = ppermute(going_left, "Y", ring_shift(n, -1));
      going_right = ppermute(going_right, "Y", ring_shift(n, +1));
    }
    accum = accumulate(accum, from_right + from_left);
  }
  return accum;
}

// lhs[b, k] @ rhs[k, n * c] summed over the ring and scattered: the device ends with output chunk
// idx. At step i it adds its partial product for chunk idx + i + 1 to the accumulator that came
// from its right neighbour (who started that chunk) and passes it left; after n steps the chunk
// it holds is its own. Only [b, c] accumulators move, never the [b, n * c] partial products.
Array reducescatter_ring(const Array& lhs, const Array& rhs) {
  const int n = axis_size("Y");
  const Array idx = axis_index("Y");
  const int64_t chunk = rhs.shape()[1] / n;
  Array accum;
  for (int i = 0; i < n; ++i) {
    const Array partial = matmul(lhs, cols_from(rhs, ring_chunk(idx, i + 1, n) * chunk, chunk));
    accum = accumulate(accum, partial);
    if (i + 1 < n) accum = ppermute(accum, "Y", ring_shift(n, -1));
  }
  return accum;
}

// Two half-width accumulators: the first half of every output chunk travels left (started by the
// right neighbour), the second half right (started by the left neighbour).
Array reducescatter_bidirectional(const Array& lhs, const Array& rhs) {
  const int n = axis_size("Y");
  const Array idx = axis_index("Y");
  const int64_t chunk = rhs.shape()[1] / n, half = chunk / 2;
  if (chunk % 2 != 0)
    throw Error("reducescatter_collective_matmul_bidirectional: the output chunk (" +
                std::to_string(chunk) + ") must be even to split between the two directions");
  Array going_left, going_right;
  for (int i = 0; i < n; ++i) {
    going_left = accumulate(going_left,
                            matmul(lhs, cols_from(rhs, ring_chunk(idx, i + 1, n) * chunk, half)));
    going_right =
        accumulate(going_right,
                   matmul(lhs, cols_from(rhs, ring_chunk(idx, -(i + 1), n) * chunk + half, half)));
    if (i + 1 < n) {
      going_left = ppermute(going_left, "Y", ring_shift(n, -1));
      going_right = ppermute(going_right, "Y", ring_shift(n, +1));
    }
  }
  return concatenate({going_left, going_right}, 1);
}

// ---- Sorting tokens into per-group buffers (Problem 2) ---------------------------------------

// [g]: sum of counts[a] over a < b, as a masked sum (meshvk has no cumsum).
Array exclusive_prefix_sum(const Array& counts) {
  const int32_t g = static_cast<int32_t>(counts.shape()[0]);
  const Array i = arange(g);
  const Array before = less(reshape(i, {g, 1}), reshape(i, {1, g}));
  return sum(where(before, reshape(counts, {g, 1}), 0), {0});
}

// Where each element lands when int32 keys in [0, groups) are sorted stably: the sort order,
// each group's count and first sorted position, and each element's rank within its group.
struct Grouping {
  Array order;   // int32[n]: the element at each sorted position
  Array counts;  // int32[groups]
  Array starts;  // int32[groups]
  Array rank;    // int32[n]
};

Grouping group_by_key(const Array& keys, int groups) {
  Grouping g;
  g.order = argsort(keys);
  g.counts = astype(sum(one_hot(keys, groups), {0}), DType::int32);
  g.starts = exclusive_prefix_sum(g.counts);
  // argsort of a permutation is its inverse: each element's sorted position.
  g.rank = argsort(g.order) - take(g.starts, keys);
  return g;
}

// The rows of x[n, ...] of the first `groups` groups, ranks [first, first + capacity) of each,
// as [groups, capacity, ...]; slots past a group's count hold `fill`.
Array gather_groups(const Array& x, const Grouping& g, int groups, int64_t first, int64_t capacity,
                    const Operand& fill) {
  const Array slots = reshape(arange(static_cast<int32_t>(capacity)) + first, {1, capacity});
  const Array starts = reshape(slice(g.starts, {0}, {groups}), {groups, 1});
  const Array counts = reshape(slice(g.counts, {0}, {groups}), {groups, 1});
  const Array rows = take(x, take(g.order, starts + slots), 0);  // [groups, capacity, ...]
  Shape mask_shape = {groups, capacity};
  mask_shape.resize(rows.ndim(), 1);
  return where(reshape(less(slots, counts), mask_shape), rows, fill);
}

// The inverse of gather_groups for results y[groups, capacity, f]: out[s] = y[key, rank - first]
// for the elements that were in the window, zeros for the others (keys >= groups included).
Array scatter_back(const Array& y, const Array& keys, const Grouping& g, int64_t first,
                   int64_t capacity) {
  const int64_t groups = y.shape()[0], f = y.shape()[2], n = keys.shape()[0];
  const Array slot = g.rank - first;
  const Array inside =
      logical_and(logical_and(less(keys, groups), greater_equal(slot, 0)), less(slot, capacity));
  const Array flat = keys * capacity + minimum(maximum(slot, 0), capacity - 1);
  const Array rows = take(reshape(y, {groups * capacity, f}), flat, 0);
  return where(reshape(inside, {n, 1}), rows, 0.0f);
}

// Tokens x[t, D] through the local experts w[El, D, F] they are addressed to (ids[t], -1: none):
// each expert multiplies every received token and keeps its own, so nothing [El, t, D] is built.
Array apply_local_experts(const Array& x, const Array& ids, const Array& w) {
  const int64_t experts = w.shape()[0], d = w.shape()[1], f = w.shape()[2], t = x.shape()[0];
  Array out;
  for (int64_t e = 0; e < experts; ++e) {
    const Array we = reshape(slice(w, {e, 0, 0}, {e + 1, d, f}), {d, f});
    const Array mine = reshape(equal(ids, static_cast<int32_t>(e)), {t, 1});
    out = accumulate(out, where(mine, matmul(x, we), 0.0f));
  }
  return out;
}

// The body of moe_all_to_all for this device's tokens a[S_l, D_l], experts w[El, D, F_l] and
// routing b[S_l]: tokens go to the X shard of their expert, in rounds of `capacity` per
// destination, and come back through a second all_to_all.
Array moe_all_to_all_local(const Array& a, const Array& w, const Array& b, int64_t capacity) {
  const Array tokens = all_gather(a, "Y", 1, true);  // [S_l, D]: W needs the whole of D
  const int X = axis_size("X");
  const int32_t local_experts = static_cast<int32_t>(w.shape()[0]);
  const int64_t s_local = tokens.shape()[0], f_local = w.shape()[2], d = tokens.shape()[1];
  if (capacity <= 0) capacity = (s_local + X - 1) / X;
  const Array destination = floor_divide(b, local_experts);
  const Array expert_there = b - destination * local_experts;
  const Grouping g = group_by_key(destination, X);
  // A while_loop over rounds until every token went out: the trip count is static here (the
  // worst case, every token to one shard), so each round moves [X, capacity, D] and no more.
  const int64_t rounds = (s_local + capacity - 1) / capacity;
  Array out;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t first = r * capacity;
    const Array sent = gather_groups(tokens, g, X, first, capacity, 0.0f);
    const Array sent_ids = gather_groups(expert_there, g, X, first, capacity, -1);
    // Untiled all_to_all: slice j goes to shard j; what arrives is stacked by source.
    const Array got = reshape(all_to_all(sent, "X", 0, 0), {X * capacity, d});
    const Array got_ids = reshape(all_to_all(sent_ids, "X", 0, 0), {X * capacity});
    const Array y = apply_local_experts(got, got_ids, w);
    const Array back = all_to_all(reshape(y, {X, capacity, f_local}), "X", 0, 0);
    out = accumulate(out, scatter_back(back, destination, g, first, capacity));
  }
  return out;
}

// Every row of x[S, D] k times in a row: [S * k, D].
Array repeat_rows(const Array& x, int k) {
  const int64_t s = x.shape()[0], d = x.shape()[1];
  return reshape(broadcast_to(reshape(x, {s, 1, d}), {s, k, d}), {s * k, d});
}

}  // namespace

// ---- Collective matmul -----------------------------------------------------------------------

Array matmul_jit(const Mesh& mesh, const Array& A, const Array& W) {
  const auto f = jit([](const Array& lhs, const Array& rhs) { return matmul(lhs, rhs); },
                     {.out_shardings = {NamedSharding(mesh, P("X", "Y"))}, .name = "matmul"});
  return f(A, W);
}

Array allgather_matmul(const Mesh& mesh, const Array& A, const Array& W) {
  const auto body = [](const Array& lhs, const Array& rhs) {
    return matmul(all_gather(lhs, "Y", 1, true), rhs);
  };
  return shard_map(body, mesh, {P("X", "Y"), P(None, "Y")}, P("X", "Y"))(A, W);
}

Array collective_matmul_unidirectional(const Mesh& mesh, const Array& A, const Array& W) {
  return shard_map(allgather_lhs_ring, mesh, {P("X", "Y"), P(None, "Y")}, P("X", "Y"))(A, W);
}

Array collective_matmul_bidirectional(const Mesh& mesh, const Array& A, const Array& W) {
  return shard_map(allgather_lhs_bidirectional, mesh, {P("X", "Y"), P(None, "Y")}, P("X", "Y"))(A,
                                                                                                W);
}

// ---- AllReduce matmul ------------------------------------------------------------------------

Array allreduce_matmul_naive(const Mesh& mesh, const Array& A, const Array& W) {
  const auto body = [](const Array& a, const Array& w) { return psum(matmul(a, w), "Y"); };
  return shard_map(body, mesh, {P("X", "Y"), P("Y", None)}, P("X", None))(A, W);
}

Array allreduce_matmul_tiled_psum(const Mesh& mesh, const Array& A, const Array& W) {
  const auto body = [](const Array& a, const Array& w) {
    const int tiles = axis_size("Y");
    const int64_t f = w.shape()[1], tile = f / tiles;
    std::vector<Array> reduced;
    for (int t = 0; t < tiles; ++t)
      reduced.push_back(psum(matmul(a, cols(w, t * tile, (t + 1) * tile)), "Y"));
    return concatenate(reduced, 1);
  };
  return shard_map(body, mesh, {P("X", "Y"), P("Y", None)}, P("X", None))(A, W);
}

// The reduce-scatter ring leaves each device one reduced chunk; gathering them needs no ring of
// our own, since nothing is left to overlap with, and all_gather's result is known to be the same
// along 'Y', which out_specs P('X', None) requires (shard_map cannot be told a ppermute result is).
Array allreduce_collective_matmul_unidirectional(const Mesh& mesh, const Array& A, const Array& W) {
  const auto body = [](const Array& a, const Array& w) {
    return all_gather(reducescatter_ring(a, w), "Y", 1, true);
  };
  return shard_map(body, mesh, {P("X", "Y"), P("Y", None)}, P("X", None))(A, W);
}

Array allreduce_collective_matmul_bidirectional(const Mesh& mesh, const Array& A, const Array& W) {
  const auto body = [](const Array& a, const Array& w) {
    return all_gather(reducescatter_bidirectional(a, w), "Y", 1, true);
  };
  return shard_map(body, mesh, {P("X", "Y"), P("Y", None)}, P("X", None))(A, W);
}

// ---- ReduceScatter matmul --------------------------------------------------------------------

Array reducescatter_matmul_naive(const Mesh& mesh, const Array& Tmp, const Array& W2) {
  const auto body = [](const Array& t, const Array& w) {
    return psum_scatter(matmul(t, w), "Y", 1, true);
  };
  return shard_map(body, mesh, {P("X", "Y"), P("Y", None)}, P("X", "Y"))(Tmp, W2);
}

Array reducescatter_collective_matmul_unidirectional(const Mesh& mesh, const Array& Tmp,
                                                     const Array& W2) {
  return shard_map(reducescatter_ring, mesh, {P("X", "Y"), P("Y", None)}, P("X", "Y"))(Tmp, W2);
}

Array reducescatter_collective_matmul_bidirectional(const Mesh& mesh, const Array& Tmp,
                                                    const Array& W2) {
  return shard_map(reducescatter_bidirectional, mesh, {P("X", "Y"), P("Y", None)}, P("X", "Y"))(Tmp,
                                                                                                W2);
}

// ---- Transformer block -----------------------------------------------------------------------

Array transformer_block_jit(const Mesh& mesh, const Array& In, const Array& Win,
                            const Array& Wout) {
  const NamedSharding xy(mesh, P("X", "Y"));
  const auto block = [xy](const Array& x, const Array& win, const Array& wout) {
    const Array hidden = with_sharding_constraint(einsum("bd,df->bf", x, win), xy);
    return einsum("bf,fd->bd", hidden, wout);
  };
  return jit(block, {.out_shardings = {xy}, .name = "transformer_block"})(In, Win, Wout);
}

// The three shard_map versions share their layouts: In[BX, DY], Win[D, FY], Wout[FY, D] ->
// Out[BX, DY].
template <class Body>
Array transformer_block_shard_map(const Mesh& mesh, Body body, const Array& In, const Array& Win,
                                  const Array& Wout) {
  return shard_map(body, mesh, {P("X", "Y"), P(None, "Y"), P("Y", None)}, P("X", "Y"))(In, Win,
                                                                                       Wout);
}

Array transformer_block_naive(const Mesh& mesh, const Array& In, const Array& Win,
                              const Array& Wout) {
  return transformer_block_shard_map(
      mesh,
      [](const Array& x, const Array& win, const Array& wout) {
        const Array hidden = matmul(all_gather(x, "Y", 1, true), win);
        return psum_scatter(matmul(hidden, wout), "Y", 1, true);
      },
      In, Win, Wout);
}

Array transformer_block_unidirectional(const Mesh& mesh, const Array& In, const Array& Win,
                                       const Array& Wout) {
  return transformer_block_shard_map(
      mesh,
      [](const Array& x, const Array& win, const Array& wout) {
        return reducescatter_ring(allgather_lhs_ring(x, win), wout);
      },
      In, Win, Wout);
}

Array transformer_block_bidirectional(const Mesh& mesh, const Array& In, const Array& Win,
                                      const Array& Wout) {
  return transformer_block_shard_map(
      mesh,
      [](const Array& x, const Array& win, const Array& wout) {
        return reducescatter_bidirectional(allgather_lhs_bidirectional(x, win), wout);
      },
      In, Win, Wout);
}

// ---- Problem 1 -------------------------------------------------------------------------------

Array shard_averages_jit(const Mesh& mesh, const Array& A) {
  const int64_t X = mesh.axis_size("X"), S = A.shape()[0], D = A.shape()[1];
  const auto averages = [=](const Array& a) { return mean(reshape(a, {X, S / X, D}), {1}); };
  return jit(averages,
             {.out_shardings = {NamedSharding(mesh, P("X", "Y"))}, .name = "shard_averages"})(A);
}

Array shard_averages_shard_map(const Mesh& mesh, const Array& A) {
  const auto body = [](const Array& a) { return mean(a, {0}, true); };
  return shard_map(body, mesh, {P("X", "Y")}, P("X", "Y"))(A);
}

Array roll_within_shards(const Mesh& mesh, const Array& A, int64_t shift) {
  const auto body = [shift](const Array& a) { return roll(a, shift, 0) - a; };
  return shard_map(body, mesh, {P("X", "Y")}, P("X", "Y"))(A);
}

// ---- Problem 2 -------------------------------------------------------------------------------

Array moe_local(const Array& A, const Array& W, const Array& B) {
  const int experts = static_cast<int>(W.shape()[0]);
  const int64_t S = A.shape()[0];
  // The buffer's second dimension is S because every token may pick the same expert.
  const Grouping g = group_by_key(B, experts);
  const Array buffer = gather_groups(A, g, experts, 0, S, 0.0f);  // [E, S, D]
  return scatter_back(matmul(buffer, W), B, g, 0, S);
}

Array moe_jit(const Mesh& mesh, const Array& A, const Array& W, const Array& B) {
  const auto f = jit(moe_local, {.in_shardings = {NamedSharding(mesh, P("X", "Y")),
                                                  NamedSharding(mesh, P("X", None, "Y")),
                                                  NamedSharding(mesh, P("X"))},
                                 .out_shardings = {NamedSharding(mesh, P("X", "Y"))},
                                 .name = "moe"});
  return f(A, W, B);
}

Array moe_shard_map_allgather(const Mesh& mesh, const Array& A, const Array& W, const Array& B) {
  const auto body = [](const Array& a, const Array& w, const Array& b) {
    const Array tokens = all_gather(all_gather(a, "X", 0, true), "Y", 1, true);  // [S, D]
    const Array experts = all_gather(b, "X", 0, true);                           // [S]
    const int32_t mine = static_cast<int32_t>(w.shape()[0]);
    const int64_t S = tokens.shape()[0];
    // This shard's experts are [x * El, (x + 1) * El); the other tokens go to group El, unused.
    const Array local = experts - axis_index("X") * mine;
    const Array keys = where(logical_and(greater_equal(local, 0), less(local, mine)), local, mine);
    const Grouping g = group_by_key(keys, mine + 1);
    const Array buffer = gather_groups(tokens, g, mine, 0, S, 0.0f);   // [El, S, D]
    const Array out = scatter_back(matmul(buffer, w), keys, g, 0, S);  // [S, F_l]
    return psum_scatter(out, "X", 0, true);  // each token's row back to its own shard
  };
  return shard_map(body, mesh, {P("X", "Y"), P("X", None, "Y"), P("X")}, P("X", "Y"))(A, W, B);
}

Array moe_all_to_all(const Mesh& mesh, const Array& A, const Array& W, const Array& B,
                     int64_t capacity) {
  const auto body = [capacity](const Array& a, const Array& w, const Array& b) {
    return moe_all_to_all_local(a, w, b, capacity);
  };
  return shard_map(body, mesh, {P("X", "Y"), P("X", None, "Y"), P("X")}, P("X", "Y"))(A, W, B);
}

Array top_k_experts(const Array& logits, int k) {
  const int64_t s = logits.shape()[0];
  return slice(argsort(negative(logits), -1), {0, 0}, {s, k});
}

Array moe_top_k(const Mesh& mesh, const Array& A, const Array& W, const Array& logits, int k,
                int64_t capacity) {
  const auto body = [k, capacity](const Array& a, const Array& w, const Array& l) {
    const int64_t s_local = a.shape()[0];
    const Array experts = reshape(top_k_experts(l, k), {s_local * k});
    const Array y = moe_all_to_all_local(repeat_rows(a, k), w, experts, capacity);
    return mean(reshape(y, {s_local, k, y.shape()[1]}), {1});
  };
  return shard_map(body, mesh, {P("X", "Y"), P("X", None, "Y"), P("X", None)}, P("X", "Y"))(A, W,
                                                                                            logits);
}

// ---- References ------------------------------------------------------------------------------

Array shard_averages_reference(const Array& A, int num_shards) {
  const int64_t S = A.shape()[0], D = A.shape()[1];
  return mean(reshape(A, {num_shards, S / num_shards, D}), {1});
}

Array roll_within_shards_reference(const Array& A, int num_shards, int64_t shift) {
  const int64_t S = A.shape()[0], D = A.shape()[1];
  const Array blocks = reshape(A, {num_shards, S / num_shards, D});
  return reshape(roll(blocks, shift, 1) - blocks, {S, D});
}

Array moe_reference(const Array& A, const Array& W, const Array& B) {
  const int64_t E = W.shape()[0], S = A.shape()[0];
  const Array every = einsum("sd,edf->esf", A, W);
  const Array pick = reshape(transpose(one_hot(B, static_cast<int>(E))), {E, S, 1});
  return sum(every * pick, {0});
}

Array moe_top_k_reference(const Array& A, const Array& W, const Array& logits, int k) {
  const int64_t S = logits.shape()[0], E = logits.shape()[1];
  // rank[s, e]: experts whose logit beats e's (ties to the lower index).
  const Array mine = reshape(logits, {S, E, 1}), other = reshape(logits, {S, 1, E});
  const Array e = arange(static_cast<int32_t>(E));
  const Array lower = less(reshape(e, {1, 1, E}), reshape(e, {1, E, 1}));
  const Array beats = logical_or(greater(other, mine), logical_and(equal(other, mine), lower));
  const Array rank = sum(astype(beats, DType::int32), {2});
  const Array weights = where(less(rank, k), 1.0f / static_cast<float>(k), 0.0f);  // [S, E]
  return einsum("se,esf->sf", weights, einsum("sd,edf->esf", A, W));
}

// ---- Cases -----------------------------------------------------------------------------------

float max_abs_diff(const Array& got, const Array& want) {
  if (got.shape() != want.shape()) return INFINITY;
  const auto as_floats = [](const Array& x) {
    if (x.dtype() == DType::float32) return x.to_host<float>();
    const auto ints = astype(x, DType::float32);
    return ints.to_host<float>();
  };
  const auto a = as_floats(got), b = as_floats(want);
  float diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (!std::isnan(a[i])) diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return diff;
}

bool matches(const Comparison& c) {
  return max_abs_diff(c.got, c.want) <= c.tolerance;
}

Array small_ints(Shape shape, int salt) {
  const int32_t n = static_cast<int32_t>(shape_size(shape));
  return astype((arange(n) * (7 + salt)) % 11 - 5, DType::float32).reshape(std::move(shape));
}

namespace {

// The same values as an uncommitted array on one device: the unsharded reference's input.
Array unsharded(const Array& x) {
  if (x.dtype() == DType::int32) {
    const auto v = x.to_host<int32_t>();
    return array(std::span<const int32_t>(v), x.shape());
  }
  const auto v = x.to_host<float>();
  return array(std::span<const float>(v), x.shape());
}

// Routing for S tokens over E experts, skewed (a third of the tokens pick expert 0) so that
// some destinations overflow the balanced capacity and the all_to_all needs several rounds.
Array skewed_routing(int64_t S, int E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> b(static_cast<size_t>(S));
  for (auto& v : b) v = rng() % 3 == 0 ? 0 : static_cast<int32_t>(rng() % E);
  return array(std::span<const int32_t>(b));
}

// Sizes that divide every 8-device (X, Y) mesh, with even chunks for the bidirectional rings.
constexpr int64_t kB = 16, kD = 32, kF = 64;
constexpr int64_t kS = 32, kModel = 16, kHidden = 16;
constexpr int kExperts = 8, kTopK = 2;
constexpr int64_t kShift = 3;

// "shard_map(body, mesh, in_specs=(...), out_specs=...)(args)", as the >>> lines show it.
std::string shard_map_text(const std::string& body, const std::string& in_specs,
                           const std::string& out_spec, const std::string& args) {
  return "shard_map(" + body + ", mesh, in_specs=" + in_specs + ", out_specs=" + out_spec + ")(" +
         args + ")";
}

const char* const kAllGatherInputs =
    "A = small_ints((16, 32)) @ P('X', 'Y'); W = small_ints((32, 64)) @ P(None, 'Y')";
const char* const kContractingInputs =
    "A = small_ints((16, 32)) @ P('X', 'Y'); W = small_ints((32, 64)) @ P('Y', None)";
const char* const kReduceScatterInputs =
    "Tmp = small_ints((16, 64)) @ P('X', 'Y'); W2 = small_ints((64, 32)) @ P('Y', None)";
const char* const kBlockInputs =
    "In = small_ints((16, 32)) @ P('X', 'Y'); Win = small_ints((32, 64)) @ P(None, 'Y'); "
    "Wout = small_ints((64, 32)) @ P('Y', None)";
const char* const kActivationInputs = "A = small_ints((32, 16)) @ P('X', 'Y')";
const char* const kMoeInputs =
    "A = small_ints((32, 16)) @ P('X', 'Y'); W = small_ints((8, 16, 16)) @ P('X', None, 'Y'); "
    "B = int32[32] @ P('X') (a third to expert 0); logits = normal(key(2), (32, 8)) @ P('X', None)";

struct MatmulInputs {
  Array lhs, rhs;
};

// lhs and rhs of small integers laid out by the given specs.
MatmulInputs matmul_inputs(const Mesh& mesh, Shape lhs, const PartitionSpec& lhs_spec, Shape rhs,
                           const PartitionSpec& rhs_spec) {
  return {put(mesh, small_ints(std::move(lhs), 0), lhs_spec),
          put(mesh, small_ints(std::move(rhs), 1), rhs_spec)};
}

using MatmulProgram = Array (*)(const Mesh&, const Array&, const Array&);

// A[B_X, D_Y] @ W[D, F_Y] against the jit matmul, as the tutorial's assert_array_equal.
ScalingBookCase allgather_case(std::string name, std::string python, MatmulProgram program) {
  return {std::move(name), "collective matmul", kAllGatherInputs, std::move(python),
          [program](const Mesh& mesh) {
            const auto in = matmul_inputs(mesh, {kB, kD}, P("X", "Y"), {kD, kF}, P(None, "Y"));
            return Comparison{program(mesh, in.lhs, in.rhs), matmul_jit(mesh, in.lhs, in.rhs)};
          }};
}

// lhs @ rhs with the contracting dimension sharded over 'Y' on both sides, against the
// unsharded matmul.
ScalingBookCase contracting_case(std::string name, std::string problem, std::string inputs,
                                 std::string python, Shape lhs, Shape rhs, MatmulProgram program) {
  return {std::move(name), std::move(problem), std::move(inputs), std::move(python),
          [=](const Mesh& mesh) {
            const auto in = matmul_inputs(mesh, lhs, P("X", "Y"), rhs, P("Y", None));
            return Comparison{program(mesh, in.lhs, in.rhs),
                              matmul(unsharded(in.lhs), unsharded(in.rhs))};
          }};
}

using BlockProgram = Array (*)(const Mesh&, const Array&, const Array&, const Array&);

ScalingBookCase block_case(std::string name, std::string python, BlockProgram program) {
  return {std::move(name), "Problem 3 (Transformer block)", kBlockInputs, std::move(python),
          [program](const Mesh& mesh) {
            const Array in = put(mesh, small_ints({kB, kD}, 0), P("X", "Y"));
            const Array win = put(mesh, small_ints({kD, kF}, 1), P(None, "Y"));
            const Array wout = put(mesh, small_ints({kF, kD}, 2), P("Y", None));
            const Array want = matmul(matmul(unsharded(in), unsharded(win)), unsharded(wout));
            return Comparison{program(mesh, in, win, wout), want};
          }};
}

using ActivationProgram = std::function<Array(const Mesh&, const Array&)>;
using ActivationReference = std::function<Array(const Array&, int num_shards)>;

ScalingBookCase activation_case(std::string name, std::string python, ActivationProgram program,
                                ActivationReference reference) {
  return {std::move(name), "Problem 1", kActivationInputs, std::move(python),
          [program = std::move(program), reference = std::move(reference)](const Mesh& mesh) {
            const Array A = put(mesh, small_ints({kS, kModel}, 3), P("X", "Y"));
            return Comparison{program(mesh, A), reference(unsharded(A), mesh.axis_size("X"))};
          }};
}

struct MoeInputs {
  Array A, W, B, logits;
};

MoeInputs moe_inputs(const Mesh& mesh) {
  return {put(mesh, small_ints({kS, kModel}, 0), P("X", "Y")),
          put(mesh, small_ints({kExperts, kModel, kHidden}, 1), P("X", None, "Y")),
          put(mesh, skewed_routing(kS, kExperts, 7), P("X")),
          normal(random_key(2), {kS, kExperts}, NamedSharding(mesh, P("X", None)))};
}

using MoeProgram = std::function<Array(const Mesh&, const MoeInputs&)>;

ScalingBookCase moe_case(std::string name, std::string python, MoeProgram program) {
  return {std::move(name), "Problem 2 (mixture of experts)", kMoeInputs, std::move(python),
          [program = std::move(program)](const Mesh& mesh) {
            const MoeInputs in = moe_inputs(mesh);
            const Array want = moe_reference(unsharded(in.A), unsharded(in.W), unsharded(in.B));
            return Comparison{program(mesh, in), want};
          }};
}

}  // namespace

std::vector<ScalingBookCase> scaling_book_cases() {
  const std::string cm_in = "(P('X', 'Y'), P(None, 'Y'))",
                    contracting_in = "(P('X', 'Y'), P('Y', None))";
  const std::string block_in = "(P('X', 'Y'), P(None, 'Y'), P('Y', None))";
  const std::string moe_in = "(P('X', 'Y'), P('X', None, 'Y'), P('X'))";
  const std::string xy = "P('X', 'Y')";
  std::vector<ScalingBookCase> cases;

  cases.push_back(
      {"matmul_jit", "collective matmul", kAllGatherInputs,
       "jax.jit(lambda lhs, rhs: lhs @ rhs, out_shardings=P('X', 'Y'))(A, W)",
       [](const Mesh& mesh) {
         const auto in = matmul_inputs(mesh, {kB, kD}, P("X", "Y"), {kD, kF}, P(None, "Y"));
         return Comparison{matmul_jit(mesh, in.lhs, in.rhs),
                           matmul(unsharded(in.lhs), unsharded(in.rhs))};
       }});
  cases.push_back(allgather_case(
      "allgather_matmul",
      shard_map_text("lambda a, w: all_gather(a, 'Y', axis=1, tiled=True) @ w", cm_in, xy, "A, W"),
      allgather_matmul));
  cases.push_back(allgather_case(
      "collective_matmul_unidirectional",
      shard_map_text("collective_matmul_allgather_lhs_contracting", cm_in, xy, "A, W"),
      collective_matmul_unidirectional));
  cases.push_back(
      allgather_case("collective_matmul_bidirectional",
                     shard_map_text("collective_matmul_bidirectional", cm_in, xy, "A, W"),
                     collective_matmul_bidirectional));

  const std::string p3a = "Problem 3 (AllReduce matmul)", x_none = "P('X', None)";
  const auto allreduce = [&](std::string name, std::string body, MatmulProgram program) {
    return contracting_case(std::move(name), p3a, kContractingInputs,
                            shard_map_text(body, contracting_in, x_none, "A, W"), {kB, kD},
                            {kD, kF}, program);
  };
  cases.push_back(
      allreduce("allreduce_matmul_naive", "lambda a, w: psum(a @ w, 'Y')", allreduce_matmul_naive));
  cases.push_back(allreduce("allreduce_matmul_tiled_psum", "psum_of_each_output_tile",
                            allreduce_matmul_tiled_psum));
  cases.push_back(allreduce("allreduce_collective_matmul_unidirectional",
                            "reduce_scatter_ring_then_all_gather",
                            allreduce_collective_matmul_unidirectional));
  cases.push_back(allreduce("allreduce_collective_matmul_bidirectional",
                            "bidirectional_reduce_scatter_ring_then_all_gather",
                            allreduce_collective_matmul_bidirectional));

  const std::string p3b = "Problem 3 (ReduceScatter matmul)";
  const auto reducescatter = [&](std::string name, std::string body, MatmulProgram program) {
    return contracting_case(std::move(name), p3b, kReduceScatterInputs,
                            shard_map_text(body, contracting_in, xy, "Tmp, W2"), {kB, kF}, {kF, kD},
                            program);
  };
  cases.push_back(
      reducescatter("reducescatter_matmul_naive",
                    "lambda t, w: psum_scatter(t @ w, 'Y', scatter_dimension=1, tiled=True)",
                    reducescatter_matmul_naive));
  cases.push_back(reducescatter("reducescatter_collective_matmul_unidirectional",
                                "permute_the_accumulator_left",
                                reducescatter_collective_matmul_unidirectional));
  cases.push_back(reducescatter("reducescatter_collective_matmul_bidirectional",
                                "half_accumulators_left_and_right",
                                reducescatter_collective_matmul_bidirectional));

  cases.push_back(block_case("transformer_block_jit",
                             "jax.jit(block, out_shardings=P('X', 'Y'))(In, Win, Wout)  "
                             "# hidden constrained to P('X', 'Y')",
                             transformer_block_jit));
  cases.push_back(block_case(
      "transformer_block_naive",
      shard_map_text("all_gather_matmul_matmul_psum_scatter", block_in, xy, "In, Win, Wout"),
      transformer_block_naive));
  cases.push_back(block_case(
      "transformer_block_unidirectional",
      shard_map_text("allgather_ring_into_reducescatter_ring", block_in, xy, "In, Win, Wout"),
      transformer_block_unidirectional));
  cases.push_back(block_case("transformer_block_bidirectional",
                             shard_map_text("bidirectional_rings", block_in, xy, "In, Win, Wout"),
                             transformer_block_bidirectional));

  cases.push_back(activation_case(
      "shard_averages_jit",
      "jax.jit(lambda a: a.reshape(X, S // X, D).mean(axis=1), out_shardings=P('X', 'Y'))(A)",
      shard_averages_jit, shard_averages_reference));
  cases.push_back(
      activation_case("shard_averages_shard_map",
                      shard_map_text("lambda a: a.mean(axis=0, keepdims=True)", xy, xy, "A"),
                      shard_averages_shard_map, shard_averages_reference));
  cases.push_back(activation_case(
      "roll_within_shards",
      shard_map_text("lambda a: jnp.roll(a, " + std::to_string(kShift) + ", axis=0) - a", xy, xy,
                     "A"),
      [](const Mesh& mesh, const Array& A) { return roll_within_shards(mesh, A, kShift); },
      [](const Array& A, int shards) { return roll_within_shards_reference(A, shards, kShift); }));

  cases.push_back(moe_case("moe_local", "moe_local(A, W, B)  # sorted into [E, S, D], one device",
                           [](const Mesh&, const MoeInputs& in) {
                             return moe_local(unsharded(in.A), unsharded(in.W), unsharded(in.B));
                           }));
  cases.push_back(moe_case(
      "moe_jit",
      "jax.jit(moe_local, in_shardings=" + moe_in + ", out_shardings=P('X', 'Y'))(A, W, B)",
      [](const Mesh& mesh, const MoeInputs& in) { return moe_jit(mesh, in.A, in.W, in.B); }));
  cases.push_back(moe_case("moe_shard_map_allgather",
                           shard_map_text("moe_all_gather_then_sort", moe_in, xy, "A, W, B"),
                           [](const Mesh& mesh, const MoeInputs& in) {
                             return moe_shard_map_allgather(mesh, in.A, in.W, in.B);
                           }));
  cases.push_back(moe_case("moe_all_to_all",
                           shard_map_text("moe_all_to_all_rounds", moe_in, xy, "A, W, B"),
                           [](const Mesh& mesh, const MoeInputs& in) {
                             return moe_all_to_all(mesh, in.A, in.W, in.B);
                           }));
  cases.push_back({"moe_top_k", "Problem 2 (mixture of experts)", kMoeInputs,
                   shard_map_text("moe_top_k", "(P('X', 'Y'), P('X', None, 'Y'), P('X', None))", xy,
                                  "A, W, logits") +
                       "  # k = " + std::to_string(kTopK),
                   [](const Mesh& mesh) {
                     const MoeInputs in = moe_inputs(mesh);
                     const Array want = moe_top_k_reference(unsharded(in.A), unsharded(in.W),
                                                            unsharded(in.logits), kTopK);
                     return Comparison{moe_top_k(mesh, in.A, in.W, in.logits, kTopK), want};
                   }});
  return cases;
}

}  // namespace meshvk::programs
