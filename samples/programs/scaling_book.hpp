#pragma once
// The worked programs of "How To Scale Your Model", part 10 (seed 002): collective matmuls that
// overlap communication with compute, Problem 1 (shard averages, roll within shards), Problem 2
// (mixture of experts, down to an all_to_all version and top-k routing), Problem 3 (AllReduce and
// ReduceScatter collective matmuls, a Transformer block) and Problem 4 (bidirectional rings).
//
// Every program is a plain function (mesh, inputs) -> Array on meshvk's public API; wrap it in
// jit() to trace it once and replay it. Meshes have the axes ('X', 'Y'); Y may be 1. Shapes must
// divide by the mesh axes as noted; the bidirectional rings also need even chunks.
#include <functional>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"

namespace meshvk::programs {

// ---- Collective matmul: A[B_X, D_Y] @ W[D, F_Y] -> Out[B_X, F_Y] -----------------------------
// A is P('X', 'Y'), W is P(None, 'Y'); every result is P('X', 'Y').

// The tutorial's reference: jit(lhs @ rhs, out_shardings=P('X', 'Y')), left to the partitioner.
Array matmul_jit(const Mesh& mesh, const Array& A, const Array& W);
// shard_map: all_gather A's D over 'Y', then one local matmul. The communication blocks the
// matmul: the tutorial's 311 us profile.
Array allgather_matmul(const Mesh& mesh, const Array& A, const Array& W);
// shard_map: the tutorial's collective_matmul_allgather_lhs_contracting. Y steps; each multiplies
// the A chunk held now by the matching rows of the local W (dynamic_slice by axis_index) while
// the chunk moves one step left around the 'Y' ring: the 244 us profile.
Array collective_matmul_unidirectional(const Mesh& mesh, const Array& A, const Array& W);
// Problem 4's rewrite: each A chunk split in two halves, one travelling left and one right, so
// every step moves half the bytes over each link direction. Needs D / Y even.
Array collective_matmul_bidirectional(const Mesh& mesh, const Array& A, const Array& W);

// ---- Problem 3a: AllReduce matmul A[B_X, D_Y] *D W[D_Y, F] -> Out[B_X, F] ----------------------
// A is P('X', 'Y'), W is P('Y', None); every result is P('X', None).

// Local partial products summed with one psum over 'Y' after the whole matmul.
Array allreduce_matmul_naive(const Mesh& mesh, const Array& A, const Array& W);
// The tutorial's hint: tile F and psum each tile, so a tile's all-reduce can run while the next
// tile is multiplied.
Array allreduce_matmul_tiled_psum(const Mesh& mesh, const Array& A, const Array& W);
// A reduce-scatter collective matmul over F's Y chunks (the accumulator permuted around the ring,
// overlapped with the chunk matmuls), then an all_gather of the reduced chunks. Needs F % Y == 0.
Array allreduce_collective_matmul_unidirectional(const Mesh& mesh, const Array& A, const Array& W);
// The same with two accumulators going opposite ways. Needs F / Y even.
Array allreduce_collective_matmul_bidirectional(const Mesh& mesh, const Array& A, const Array& W);

// ---- Problem 3b: ReduceScatter matmul Tmp[B_X, F_Y] *F W2[F_Y, D] -> Out[B_X, D_Y] -------------
// Tmp is P('X', 'Y'), W2 is P('Y', None); every result is P('X', 'Y').

// The whole local matmul, then psum_scatter over 'Y'.
Array reducescatter_matmul_naive(const Mesh& mesh, const Array& Tmp, const Array& W2);
// Y steps; each multiplies Tmp by the W2 columns of one output chunk, adds the partial sum that
// arrived from the right and passes it on to the left, so only [B/X, D/Y] accumulators move.
Array reducescatter_collective_matmul_unidirectional(const Mesh& mesh, const Array& Tmp,
                                                     const Array& W2);
// Two half-width accumulators, one going left and one right. Needs D / Y even.
Array reducescatter_collective_matmul_bidirectional(const Mesh& mesh, const Array& Tmp,
                                                    const Array& W2);

// ---- Problem 3c: Transformer block In[B_X, D_Y] *D Win[D, F_Y] *F Wout[F_Y, D] -> Out[B_X, D_Y] -
// In is P('X', 'Y'), Win is P(None, 'Y'), Wout is P('Y', None); every result is P('X', 'Y').

// jit of the two einsums with the hidden activations constrained to P('X', 'Y').
Array transformer_block_jit(const Mesh& mesh, const Array& In, const Array& Win, const Array& Wout);
// shard_map: all_gather, two local matmuls, psum_scatter: no overlap.
Array transformer_block_naive(const Mesh& mesh, const Array& In, const Array& Win,
                              const Array& Wout);
// The all-gather collective matmul into the reduce-scatter collective matmul, both rings one way.
Array transformer_block_unidirectional(const Mesh& mesh, const Array& In, const Array& Win,
                                       const Array& Wout);
// Both rings bidirectional. Needs D / Y even.
Array transformer_block_bidirectional(const Mesh& mesh, const Array& In, const Array& Win,
                                      const Array& Wout);

// ---- Problem 1: A is float32[S_X, D_Y] -------------------------------------------------------

// [X, D_Y]: row i is the mean of the rows of X shard i. jit: the global reshape and mean, laid
// out from A's sharding (out_shardings P('X', 'Y')).
Array shard_averages_jit(const Mesh& mesh, const Array& A);
// The same with shard_map: a local mean, no communication at all.
Array shard_averages_shard_map(const Mesh& mesh, const Array& A);
// roll(x, shift, axis=0) - x inside each X shard (rows never cross shards), with shard_map.
Array roll_within_shards(const Mesh& mesh, const Array& A, int64_t shift);

// ---- Problem 2: mixture of experts, Out[s] = A[s] @ W[B[s]] ----------------------------------
// A float32[S_X, D_Y] P('X', 'Y'); W float32[E_X, D, F_Y] P('X', None, 'Y'); B int32[S_X] P('X');
// every result is float32[S, F] P('X', 'Y') (the unsharded ones live on one device).

// (a) No sharding: tokens sorted by expert (stable argsort) into a zero-padded [E, S, D] buffer,
// one batched matmul with W, and each token's row gathered back. Never builds [S, D, F].
Array moe_local(const Array& A, const Array& W, const Array& B);
// (b) moe_local under jit with the shardings above, left to the partitioner.
Array moe_jit(const Mesh& mesh, const Array& A, const Array& W, const Array& B);
// (c) shard_map: all_gather the tokens, sort them into [E/X, S, D] for this device's experts,
// and psum_scatter the outputs back to the tokens' X shards.
Array moe_shard_map_allgather(const Mesh& mesh, const Array& A, const Array& W, const Array& B);
// (d) shard_map: every X shard sends each token only to the X shard that holds its expert, with
// all_to_all over 'X', in rounds of at most `capacity` tokens per destination (0: ceil(S_l / X)
// for the S_l = S / X tokens of a shard, the load of a balanced routing). The rounds run until
// every token could have gone (a while_loop with the worst case as its static trip count), so no
// token is dropped and no [E, S, D] buffer exists: a round moves [X, capacity, D].
Array moe_all_to_all(const Mesh& mesh, const Array& A, const Array& W, const Array& B,
                     int64_t capacity = 0);
// Top-k routing: the k largest router logits of each token (argsort; ties to the lower expert).
// logits float32[S, E] -> int32[S, k].
Array top_k_experts(const Array& logits, int k);
// (e) Top-k: Out[s] = mean over j of A[s] @ W[top_k(logits[s])[j]], each token sent k times
// through the all_to_all version. logits is P('X', None).
Array moe_top_k(const Mesh& mesh, const Array& A, const Array& W, const Array& logits, int k,
                int64_t capacity = 0);

// ---- Unsharded references (one device) -------------------------------------------------------

// [X, D]: the mean of each block of S/X rows.
Array shard_averages_reference(const Array& A, int num_shards);
// roll(block, shift) - block for each block of S/X rows.
Array roll_within_shards_reference(const Array& A, int num_shards, int64_t shift);
// Every token through every expert (einsum 'sd,edf->esf'), then each token's own row picked with
// one_hot(B): plainly right, E times the work.
Array moe_reference(const Array& A, const Array& W, const Array& B);
// The same with one_hot weights 1/k on each token's k highest-ranked experts, the ranks counted
// by comparing logits pairwise (no argsort).
Array moe_top_k_reference(const Array& A, const Array& W, const Array& logits, int k);

// ---- Every program against its reference, for samples, tests and the inspector ---------------

// A program's result beside its reference's; `tolerance` 0 means bit for bit.
struct Comparison {
  Array got;
  Array want;
  float tolerance = 0;
};
// Largest |got - want| over the host copies (infinity when the shapes differ).
float max_abs_diff(const Array& got, const Array& want);
bool matches(const Comparison& c);

struct ScalingBookCase {
  std::string name;     // "collective_matmul_unidirectional"
  std::string problem;  // "collective matmul", "Problem 2 (mixture of experts)", ...
  std::string inputs;   // what run() builds, for >>> lines
  std::string python;   // the JAX call it mirrors, for >>> lines
  // Builds small inputs on `mesh` (axes 'X', 'Y', 8 devices or fewer), runs the program and its
  // reference.
  std::function<Comparison(const Mesh& mesh)> run;
};
// Every variant of this file at small sizes that divide every 8-device (X, Y) mesh.
std::vector<ScalingBookCase> scaling_book_cases();

// Small integers as float32 ((i * (7 + salt)) % 11 - 5), so every sum the programs make is
// exact and a chunked matmul equals the plain one bit for bit, as the tutorial's
// assert_array_equal expects.
Array small_ints(Shape shape, int salt);

}  // namespace meshvk::programs
