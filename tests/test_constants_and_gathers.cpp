// Bytes the partitioner does not move: constants built inside jit are made on each device that
// uses them (not broadcast from device 0 on every call), and take/gather/one_hot keep the
// batch sharding of their indices. Checked on the programs' collective counts, with the values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

int count(const mv::Lowered& l, const std::string& kind) {
  const auto& c = l.collective_counts();
  return c.count(kind) ? c.at(kind).count : 0;
}

const auto put = placed_array;

Array put_ids(const std::vector<int32_t>& v, mv::Shape s, const mv::Sharding& sharding) {
  return mv::device_put(std::span<const int32_t>(v), s, sharding);
}

std::vector<float> iota_floats(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 13) - 6.f;
  return v;
}

}  // namespace

// The causal mask of an attention layer: arange and a comparison, combined with scores split
// over 'data'. It was made on device 0 and copied to the 7 others on every call (114688 bytes
// in the GPT step).
TEST(Constants, CausalMaskIsMadeOnEachDevice) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t s = 16;
  const auto scores = put(iota_floats(4 * s * s), {4, s, s}, mv::NamedSharding(mesh, P("data")));
  const auto masked = mv::jit([s](const Array& x) {
    const Array pos = mv::arange(static_cast<int32_t>(s));
    const Array causal = mv::reshape(pos, {1, s}) <= mv::reshape(pos, {s, 1});
    return mv::where(causal, x, -std::numeric_limits<float>::infinity());
  });
  const mv::Lowered lowered = masked.lower(scores);
  EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
  EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
  EXPECT_NE(lowered.as_text().find("constant"), std::string::npos) << lowered.as_text();
  const Array r = masked(scores);
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("data"))));
  const auto got = r.to_host<float>();
  const auto in = iota_floats(4 * s * s);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t q = 0; q < s; ++q)
      for (int64_t k = 0; k < s; ++k) {
        const size_t i = static_cast<size_t>((b * s + q) * s + k);
        if (k <= q) EXPECT_EQ(got[i], in[i]);
        else EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0);
      }
}

// zeros/full/ones and small host constants, split or whole where they meet sharded values.
TEST(Constants, FillsAndHostScalarsAreMadeWhereTheyAreUsed) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto x = put(iota_floats(8 * 8), {8, 8}, mv::NamedSharding(mesh, P("data", "model")));
  const auto f = mv::jit([](const Array& v) {
    return v * mv::full({8, 8}, 2.f) + mv::ones({8}) + mv::array({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}) +
           mv::scalar(1.f);
  });
  const mv::Lowered lowered = f.lower(x);
  EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
  const auto got = f(x).to_host<float>();
  const auto in = iota_floats(64);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(got[i], in[i] * 2.f + 1.f + static_cast<float>(i % 8 + 1) + 1.f);
}

// A scan over stacked layers slices each stack with int32 index constants (dynamic_slice's
// starts); those met the replicated stacks as 28-byte copies from device 0, once per slice.
TEST(Constants, ScanSliceIndicesAreNotCopied) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto stacks = put(iota_floats(3 * 4 * 4), {3, 4, 4}, mv::NamedSharding(mesh, P()));
  const auto h0 = put(iota_floats(8 * 4), {8, 4}, mv::NamedSharding(mesh, P("data")));
  const auto f = mv::jit([](const Array& h, const Array& w) {
    return mv::lax::scan([](const Array& c, const Array& layer) { return std::make_pair(mv::matmul(c, layer) * 0.1f, std::nullopt); },
                         h, w)
        .first;
  });
  const mv::Lowered lowered = f.lower(h0, stacks);
  EXPECT_EQ(count(lowered, "reshard"), 0) << lowered.as_text();
  // The same values as the loop on the host's side.
  Array want = h0;
  for (int i = 0; i < 3; ++i) want = mv::matmul(want, stacks[i]) * 0.1f;
  expect_close(f(h0, stacks), want.to_host<float>());
}

// Eager constants stay where JAX makes them: uncommitted, on device 0; moving one elsewhere
// gives its values.
TEST(Constants, EagerConstantsStayOnDeviceZero) {
  const Array a = mv::arange(8.f);
  EXPECT_FALSE(a.committed());
  EXPECT_EQ(a.sharding().device_ids(), std::vector<int>{0});
  const Array mask = mv::reshape(mv::arange(4), {1, 4}) < mv::reshape(mv::arange(4), {4, 1});
  EXPECT_FALSE(mask.committed());
  EXPECT_EQ(mask.sharding().device_ids(), std::vector<int>{0});
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const Array split = mv::device_put(a, mv::NamedSharding(mesh, P("model")));
  EXPECT_TRUE(split.committed());
  EXPECT_EQ(split.to_host<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  const Array m = mv::device_put(mask, mv::NamedSharding(mesh, P("data", "model")));
  EXPECT_EQ(mv::astype(m, mv::DType::int32).to_host<int32_t>(),
            (std::vector<int32_t>{0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0}));
  // A value computed from data is copied, not made again.
  const Array data = mv::array({1.f, 2.f}) * mv::device_put(mv::array({3.f, 4.f}), mv::Sharding(mv::SingleDeviceSharding(0)));
  EXPECT_EQ(mv::device_put(data, mv::NamedSharding(mesh, P())).to_host<float>(), (std::vector<float>{3, 8}));
}

// one_hot's index range meets batch-split ids: made on each device, the result split as the ids.
TEST(Gathers, OneHotKeepsTheBatchSplit) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const auto ids = put_ids({0, 3, 1, 2, 2, 1, 3, 0}, {8}, mv::NamedSharding(mesh, P("data")));
  const auto f = mv::jit([](const Array& i) { return mv::one_hot(i, 4); });
  const mv::Lowered lowered = f.lower(ids);
  EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
  const Array r = f(ids);
  EXPECT_EQ(r.sharding(), mv::Sharding(mv::NamedSharding(mesh, P("data"))));
  const auto got = r.to_host<float>();
  const std::vector<int> hot{0, 3, 1, 2, 2, 1, 3, 0};
  for (size_t i = 0; i < 8; ++i)
    for (size_t c = 0; c < 4; ++c) EXPECT_EQ(got[i * 4 + c], static_cast<int>(c) == hot[i] ? 1.f : 0.f);
}

// An embedding lookup: a table whole on every device (or split over 'model' by feature) and token
// ids split over 'data'. JAX's gather keeps the ids' split; the ids were gathered whole before.
TEST(Gathers, TakeKeepsTheIdsSplit) {
  const auto mesh = mv::make_mesh({2, 4}, {"data", "model"});
  const int64_t vocab = 16, d = 8, batch = 4, seq = 6;
  std::vector<int32_t> host_ids;
  for (int64_t i = 0; i < batch * seq; ++i) host_ids.push_back(static_cast<int32_t>((i * 7) % vocab));
  const auto ids = put_ids(host_ids, {batch, seq}, mv::NamedSharding(mesh, P("data")));
  const auto table_values = iota_floats(vocab * d);
  std::vector<float> want;
  for (const int32_t t : host_ids)
    for (int64_t j = 0; j < d; ++j) want.push_back(table_values[static_cast<size_t>(t * d + j)]);
  const auto lookup = mv::jit([](const Array& table, const Array& i) { return mv::take(table, i, 0); });
  const auto gather = mv::jit([](const Array& table, const Array& i) { return table[i]; });
  struct Case {
    mv::PartitionSpec table;
    mv::PartitionSpec result;
  };
  for (const Case& c : {Case{P(), P("data")}, Case{P(mv::None, "model"), P("data", mv::None, "model")}}) {
    SCOPED_TRACE("table " + c.table.to_string());
    const auto table = put(table_values, {vocab, d}, mv::NamedSharding(mesh, c.table));
    const auto check = [&](const auto& f) {
      const mv::Lowered lowered = f.lower(table, ids);
      EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
      const Array r = f(table, ids);
      EXPECT_TRUE(r.sharding().is_equivalent_to(mv::NamedSharding(mesh, c.result), 3)) << r.sharding().to_string();
      EXPECT_EQ(r.to_host<float>(), want);
    };
    check(lookup);
    check(gather);
  }
  // An uncommitted table (made on device 0) follows the split ids.
  const auto constant_table = mv::jit([vocab, d](const Array& i) {
    return mv::take(mv::reshape(mv::arange(static_cast<float>(vocab * d)), {vocab, d}), i, 0);
  });
  const mv::Lowered lowered = constant_table.lower(ids);
  EXPECT_TRUE(lowered.collective_counts().empty()) << lowered.as_text();
  EXPECT_TRUE(constant_table(ids).sharding().is_equivalent_to(mv::NamedSharding(mesh, P("data")), 3));
}
