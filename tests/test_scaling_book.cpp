// The worked programs of "How To Scale Your Model", part 10 (samples/programs/scaling_book.cpp):
// every variant against its reference on every 8-device (X, Y) mesh, and the properties that make
// the collective versions what they claim to be (which collectives they run, on what pieces).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "scaling_book.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
namespace programs = meshvk::programs;
using mv::Array;
using mv::P;

namespace {

struct MeshShape {
  int x, y;
};
void PrintTo(const MeshShape& s, std::ostream* os) {
  *os << "(" << s.x << ", " << s.y << ")";
}

const std::vector<MeshShape> kMeshShapes = {{2, 4}, {4, 2}, {8, 1}, {1, 8}};

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& c : programs::scaling_book_cases()) names.push_back(c.name);
  return names;
}

const programs::ScalingBookCase& find_case(const std::string& name) {
  static const auto cases = programs::scaling_book_cases();
  for (const auto& c : cases)
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

}  // namespace

class EveryProgramOnEveryMesh : public testing::TestWithParam<std::tuple<std::string, MeshShape>> {
};

TEST_P(EveryProgramOnEveryMesh, EqualsItsReference) {
  const auto& [name, shape] = GetParam();
  const mv::Mesh mesh = mv::make_mesh({shape.x, shape.y}, {"X", "Y"});
  const programs::Comparison r = find_case(name).run(mesh);
  EXPECT_EQ(r.got.shape(), r.want.shape());
  EXPECT_LE(programs::max_abs_diff(r.got, r.want), r.tolerance) << name;
}

// "collective_matmul_unidirectional_2x4"
std::string case_and_mesh(const testing::TestParamInfo<EveryProgramOnEveryMesh::ParamType>& info) {
  const auto& [name, shape] = info.param;
  return name + "_" + std::to_string(shape.x) + "x" + std::to_string(shape.y);
}

INSTANTIATE_TEST_SUITE_P(ScalingBook, EveryProgramOnEveryMesh,
                         testing::Combine(testing::ValuesIn(case_names()),
                                          testing::ValuesIn(kMeshShapes)),
                         case_and_mesh);

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Array put(const mv::Mesh& mesh, const Array& x, const mv::PartitionSpec& spec) {
  return mv::device_put(x, mv::NamedSharding(mesh, spec));
}

// The same float values as an uncommitted array on one device.
Array unsharded(const Array& x) {
  const std::vector<float> values = x.to_host<float>();
  return mv::array(std::span<const float>(values), x.shape());
}

using MatmulProgram = Array (*)(const mv::Mesh&, const Array&, const Array&);

// The partitioned program jit records for program(mesh, lhs, rhs).
std::string program_text(MatmulProgram program, const mv::Mesh& mesh, const Array& lhs,
                         const Array& rhs) {
  const auto f = mv::jit([&](const Array& a, const Array& w) { return program(mesh, a, w); });
  return f.program_text(lhs, rhs);
}

}  // namespace

// The point of the collective matmul: no all-gather; Y - 1 permutes of A's [B/X, D/Y] chunk
// (halves both ways when bidirectional) instead, each after a chunk's matmul.
TEST(ScalingBookCollectives, CollectiveMatmulPermutesChunksInsteadOfGathering) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array A = put(mesh, programs::small_ints({16, 32}, 0), P("X", "Y"));
  const Array W = put(mesh, programs::small_ints({32, 64}, 1), P(mv::None, "Y"));
  const std::string naive = program_text(programs::allgather_matmul, mesh, A, W);
  EXPECT_EQ(count(naive, "(all_gather) over ('Y',)"), 1) << naive;
  EXPECT_EQ(count(naive, "(ppermute)"), 0) << naive;

  const std::string uni = program_text(programs::collective_matmul_unidirectional, mesh, A, W);
  EXPECT_EQ(count(uni, "(all_gather)"), 0) << uni;
  EXPECT_EQ(count(uni, "(ppermute) over ('Y',)"), 3) << uni;
  EXPECT_EQ(count(uni, "local float32[8,8], 256 B per device"), 3) << uni;
  EXPECT_EQ(count(uni, "dot_general: local float32(8, 8) x (8, 16)"), 4) << uni;

  const std::string bi = program_text(programs::collective_matmul_bidirectional, mesh, A, W);
  EXPECT_EQ(count(bi, "(all_gather)"), 0) << bi;
  EXPECT_EQ(count(bi, "(ppermute) over ('Y',)"), 6) << bi;
  EXPECT_EQ(count(bi, "local float32[8,4], 128 B per device"), 6) << bi;
}

// The reduce-scatter ring moves only [B/X, D/Y] accumulators, never the [B/X, D] partial sums.
TEST(ScalingBookCollectives, ReduceScatterMatmulPermutesOnlyAccumulators) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array Tmp = put(mesh, programs::small_ints({16, 64}, 0), P("X", "Y"));
  const Array W2 = put(mesh, programs::small_ints({64, 32}, 1), P("Y", mv::None));
  const std::string uni =
      program_text(programs::reducescatter_collective_matmul_unidirectional, mesh, Tmp, W2);
  EXPECT_EQ(count(uni, "(psum_scatter)"), 0) << uni;
  EXPECT_EQ(count(uni, "(ppermute) over ('Y',)"), 3) << uni;
  EXPECT_EQ(count(uni, "local float32[8,8], 256 B per device"), 3) << uni;
  const std::string bi =
      program_text(programs::reducescatter_collective_matmul_bidirectional, mesh, Tmp, W2);
  EXPECT_EQ(count(bi, "(ppermute) over ('Y',)"), 6) << bi;
  EXPECT_EQ(count(bi, "local float32[8,4], 128 B per device"), 6) << bi;
}

// Problem 3's block: the two rings are its only communication, 2 (Y - 1) permutes one way.
TEST(ScalingBookCollectives, TransformerBlockCommunicatesOnlyThroughItsRings) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array In = put(mesh, programs::small_ints({16, 32}, 0), P("X", "Y"));
  const Array Win = put(mesh, programs::small_ints({32, 64}, 1), P(mv::None, "Y"));
  const Array Wout = put(mesh, programs::small_ints({64, 32}, 2), P("Y", mv::None));
  const auto block = mv::jit([&](const Array& x, const Array& win, const Array& wout) {
    return programs::transformer_block_unidirectional(mesh, x, win, wout);
  });
  const std::string text = block.program_text(In, Win, Wout);
  EXPECT_EQ(count(text, " over ("), 6) << text;
  EXPECT_EQ(count(text, "(ppermute) over ('Y',)"), 6) << text;
}

// Problem 1's hint: the shard averages need no communication at all with shard_map.
TEST(ScalingBookProblem1, ShardMapAveragesCommunicateNothing) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array A = put(mesh, programs::small_ints({32, 16}, 0), P("X", "Y"));
  const auto f =
      mv::jit([&](const Array& a) { return programs::shard_averages_shard_map(mesh, a); });
  const std::string text = f.program_text(A);
  EXPECT_EQ(count(text, " over ("), 0) << text;
  EXPECT_EQ(count(text, "reshard"), 0) << text;
  EXPECT_EQ(f(A).shape(), (mv::Shape{2, 16}));
}

// However small the capacity, the rounds carry every token; a capacity of the whole shard is one
// round. Every token picks expert 0 here: the worst case for the rounds.
TEST(ScalingBookMoe, AllToAllRoundsCarryEveryTokenAtAnyCapacity) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array A = put(mesh, programs::small_ints({32, 16}, 0), P("X", "Y"));
  const Array W = put(mesh, programs::small_ints({8, 16, 16}, 1), P("X", mv::None, "Y"));
  for (const bool all_to_one : {false, true}) {
    std::vector<int32_t> b(32);
    for (int i = 0; i < 32; ++i) b[i] = all_to_one ? 0 : (i * 5 + 1) % 8;
    const Array B = put(mesh, mv::array(std::span<const int32_t>(b)), P("X"));
    const Array want =
        programs::moe_reference(unsharded(A), unsharded(W), mv::array(std::span<const int32_t>(b)));
    for (const int64_t capacity : {2, 5, 16}) {
      const Array got = programs::moe_all_to_all(mesh, A, W, B, capacity);
      EXPECT_EQ(programs::max_abs_diff(got, want), 0.0f) << "capacity " << capacity;
    }
  }
}

TEST(ScalingBookMoe, TopKPicksTheLargestLogitsTiesToTheLowerExpert) {
  const Array logits =
      mv::array({0.1f, 0.9f, 0.5f, 0.2f, 3.f, 1.f, 2.f, 0.f, 1.f, 1.f, 0.f, 1.f}, mv::Shape{3, 4});
  EXPECT_EQ(programs::top_k_experts(logits, 2).to_host<int32_t>(),
            (std::vector<int32_t>{1, 2, 0, 2, 0, 1}));
  EXPECT_EQ(programs::top_k_experts(logits, 1).to_host<int32_t>(), (std::vector<int32_t>{1, 0, 0}));
}

// The bidirectional rings split every chunk in two; an odd chunk is a meshvk::Error naming it.
TEST(ScalingBookCollectives, BidirectionalRingNeedsEvenChunks) {
  const auto mesh = mv::make_mesh({2, 4}, {"X", "Y"});
  const Array A = put(mesh, programs::small_ints({16, 12}, 0), P("X", "Y"));
  const Array W = put(mesh, programs::small_ints({12, 64}, 1), P(mv::None, "Y"));
  EXPECT_THROW(programs::collective_matmul_bidirectional(mesh, A, W), mv::Error);
  // The runtime stays usable: the unidirectional ring has no such constraint.
  EXPECT_EQ(programs::max_abs_diff(programs::collective_matmul_unidirectional(mesh, A, W),
                                   programs::matmul_jit(mesh, A, W)),
            0.0f);
}
