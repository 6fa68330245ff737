// jnp.einsum as a JAX user writes it: implicit outputs, '...', diagonals and traces, more than
// two operands (greedy pairwise order), sharded operands, gradients through it, and errors that
// name what is wrong. Every value is checked against a plain host loop over all labels.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

struct HostOperand {
  std::vector<float> values;
  mv::Shape shape;
};

// einsum with explicit letters only ("ij,jk->ik"): one loop over every assignment of labels.
std::vector<float> host_einsum(const std::string& spec, const std::vector<HostOperand>& ops) {
  const auto arrow = spec.find("->");
  const std::string out = spec.substr(arrow + 2);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const auto comma = spec.find(',', start);
    terms.push_back(
        spec.substr(start, (comma == std::string::npos || comma > arrow ? arrow : comma) - start));
    if (comma == std::string::npos || comma > arrow) break;
    start = comma + 1;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t d = 0; d < terms[k].size(); ++d) size[terms[k][d]] = ops[k].shape[d];
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  int64_t out_size = 1;
  for (const char c : out) out_size *= size[c];
  std::vector<double> acc(static_cast<size_t>(out_size), 0.0);
  std::map<char, int64_t> at;
  for (const char c : labels) at[c] = 0;
  const auto flat = [&](const std::string& t, const mv::Shape& shape) {
    int64_t f = 0;
    for (size_t d = 0; d < t.size(); ++d) f = f * shape[d] + at[t[d]];
    return f;
  };
  mv::Shape out_shape;
  for (const char c : out) out_shape.push_back(size[c]);
  while (true) {
    double p = 1;
    for (size_t k = 0; k < terms.size(); ++k)
      p *= ops[k].values[static_cast<size_t>(flat(terms[k], ops[k].shape))];
    acc[static_cast<size_t>(flat(out, out_shape))] += p;
    size_t i = 0;
    for (; i < labels.size(); ++i) {
      if (++at[labels[i]] < size[labels[i]]) break;
      at[labels[i]] = 0;
    }
    if (i == labels.size()) break;
  }
  return std::vector<float>(acc.begin(), acc.end());
}

HostOperand operand(mv::Shape shape, uint32_t seed) {
  return {random_floats(static_cast<size_t>(mv::shape_size(shape)), seed), shape};
}
Array to_array(const HostOperand& o) {
  return host_array(o.values, o.shape);
}

void expect_close(const Array& got, const std::vector<float>& want, const mv::Shape& shape) {
  EXPECT_EQ(got.shape(), shape);
  const auto v = got.to_host<float>();
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(v[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
}

}  // namespace

TEST(JaxEinsum, ImplicitOutputIsTheLabelsThatAppearOnceSorted) {
  const auto a = operand({3, 4}, 1), b = operand({4, 5}, 2);
  expect_close(mv::einsum("ij,jk", to_array(a), to_array(b)), host_einsum("ij,jk->ik", {a, b}),
               {3, 5});
  // Sorted alphabetically, not in order of appearance: "ba" is a transpose, "kj,ji" is (ik).
  expect_close(mv::einsum("ba", to_array(a)), host_einsum("ba->ab", {a}), {4, 3});
  const auto c = operand({5, 4}, 3);
  expect_close(mv::einsum("kj,ji", to_array(c), to_array(operand({4, 3}, 4))),
               host_einsum("kj,ji->ik", {c, operand({4, 3}, 4)}), {3, 5});
  // A label that appears twice is summed: "i,i" is the inner product, "ij,ij" too.
  const auto v = operand({6}, 5), w = operand({6}, 6);
  expect_close(mv::einsum("i,i", to_array(v), to_array(w)), host_einsum("i,i->", {v, w}), {});
  // Spaces are ignored, as numpy does.
  expect_close(mv::einsum(" ij , jk ", to_array(a), to_array(b)), host_einsum("ij,jk->ik", {a, b}),
               {3, 5});
}

TEST(JaxEinsum, EllipsisBroadcastsAndSums) {
  const auto a = operand({2, 3, 4, 5}, 7), b = operand({5, 6}, 8);
  expect_close(mv::einsum("...ij,...jk->...ik", to_array(a), to_array(b)),
               host_einsum("xyij,jk->xyik", {a, b}), {2, 3, 4, 6});
  // Implicit: '...' first, then the lone labels.
  expect_close(mv::einsum("...ij,jk", to_array(a), to_array(b)),
               host_einsum("xyij,jk->xyik", {a, b}), {2, 3, 4, 6});
  // Size-1 dimensions under '...' broadcast against the other operand's.
  const auto c = operand({2, 1, 4, 5}, 9), d = operand({3, 5, 6}, 10);
  HostOperand cb{{}, {2, 3, 4, 5}};
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 3; ++y)
      for (int i = 0; i < 20; ++i) cb.values.push_back(c.values[static_cast<size_t>(x * 20 + i)]);
  expect_close(mv::einsum("...ij,...jk->...ik", to_array(c), to_array(d)),
               host_einsum("xyij,yjk->xyik", {cb, d}), {2, 3, 4, 6});
  // '...' in the middle, and '...' dimensions the output leaves out are summed.
  expect_close(mv::einsum("i...j->ij", to_array(a)), host_einsum("ixyj->ij", {a}), {2, 5});
  expect_close(mv::einsum("...j->j", to_array(a)), host_einsum("ixyj->j", {a}), {5});
  // '...' standing for no dimension at all.
  expect_close(mv::einsum("...ij->...ji", to_array(b)), host_einsum("ij->ji", {b}), {6, 5});
}

TEST(JaxEinsum, DiagonalsAndTraces) {
  const auto m = operand({5, 5}, 11);
  expect_close(mv::einsum("ii->i", to_array(m)),
               host_einsum("i->i", {{[&] {
                                       std::vector<float> d;
                                       for (int i = 0; i < 5; ++i) d.push_back(m.values[i * 6]);
                                       return d;
                                     }(),
                                     {5}}}),
               {5});
  float trace = 0;
  for (int i = 0; i < 5; ++i) trace += m.values[static_cast<size_t>(i * 6)];
  expect_close(mv::einsum("ii->", to_array(m)), {trace}, {});
  expect_close(mv::einsum("ii", to_array(m)), {trace}, {});  // implicit: i appears twice, so summed
  // int32 keeps its dtype: trace of arange(16).reshape(4, 4) is 0 + 5 + 10 + 15.
  const Array t = mv::einsum("ii", mv::arange(16).reshape({4, 4}));
  EXPECT_EQ(t.dtype(), mv::DType::int32);
  EXPECT_EQ(t.to_host<int32_t>(), std::vector<int32_t>{30});
  // A diagonal of a 3-D operand, and a diagonal that then contracts with another operand.
  const auto x = operand({3, 4, 3}, 12), y = operand({4, 2}, 13);
  std::vector<float> diag;  // x[i, j, i] as (i, j)
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) diag.push_back(x.values[static_cast<size_t>((i * 4 + j) * 3 + i)]);
  const HostOperand xd{diag, {3, 4}};
  expect_close(mv::einsum("iji->ji", to_array(x)), host_einsum("ij->ji", {xd}), {4, 3});
  expect_close(mv::einsum("iji,jk->ik", to_array(x), to_array(y)),
               host_einsum("ij,jk->ik", {xd, y}), {3, 2});
}

// A diagonal selects its elements, as numpy's einsum reads them: a NaN or inf off the diagonal
// stays out of it (a product with an identity mask made it NaN), a -0 on it stays -0; also where
// the diagonal's dimension is not the first, and for the last two of three dimensions.
TEST(JaxEinsum, DiagonalsLeaveTheOtherElementsOut) {
  const float nan = std::nanf(""), inf = INFINITY;
  const Array m = mv::array({1.f, nan, inf, -0.f}, {2, 2});
  const std::vector<float> d = mv::einsum("ii->i", m).to_host<float>();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], 1.f);
  EXPECT_EQ(d[1], 0.f);
  EXPECT_TRUE(std::signbit(d[1])) << "the -0 on the diagonal";
  EXPECT_EQ(mv::einsum("ii", mv::array({1.f, nan, -inf, 3.f}, {2, 2})).to_host<float>(), std::vector<float>{4.f});
  // x[a, b, a] with NaN everywhere else, and x[j, i, i].
  std::vector<float> v(2 * 3 * 2, nan), w(3 * 2 * 2, inf);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b) v[static_cast<size_t>((a * 3 + b) * 2 + a)] = float(10 * a + b);
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) w[static_cast<size_t>((j * 2 + i) * 2 + i)] = float(10 * j + i);
  EXPECT_EQ(mv::einsum("aba->ba", mv::array(v, {2, 3, 2})).to_host<float>(),
            (std::vector<float>{0, 10, 1, 11, 2, 12}));
  EXPECT_EQ(mv::einsum("jii->ji", mv::array(w, {3, 2, 2})).to_host<float>(),
            (std::vector<float>{0, 1, 10, 11, 20, 21}));
  // The gradient of a trace is the identity, NaN-free.
  const std::vector<float> g =
      mv::grad([](const Array& x) { return mv::einsum("ii", x); })(mv::array({1.f, 2.f, 3.f, 4.f}, {2, 2})).to_host<float>();
  EXPECT_EQ(g, (std::vector<float>{1, 0, 0, 1}));
}

TEST(JaxEinsum, ManyOperandsContractPairwise) {
  const auto a = operand({8, 16}, 14), b = operand({16, 2}, 15), c = operand({2, 32}, 16),
             d = operand({32, 3}, 17);
  expect_close(mv::einsum("ij,jk,kl->il", to_array(a), to_array(b), to_array(c)),
               host_einsum("ij,jk,kl->il", {a, b, c}), {8, 32});
  expect_close(mv::einsum("ij,jk,kl", to_array(a), to_array(b), to_array(c)),
               host_einsum("ij,jk,kl->il", {a, b, c}), {8, 32});
  expect_close(mv::einsum("ab,bc,cd,de->ea", {to_array(a), to_array(b), to_array(c), to_array(d)}),
               host_einsum("ab,bc,cd,de->ea", {a, b, c, d}), {3, 8});
  // Batch labels shared by all three, a label in only one operand, and an outer product.
  const auto p = operand({2, 3, 4}, 18), q = operand({2, 4, 5}, 19), r = operand({2, 5, 6}, 20);
  expect_close(mv::einsum("bij,bjk,bkl->bil", to_array(p), to_array(q), to_array(r)),
               host_einsum("bij,bjk,bkl->bil", {p, q, r}), {2, 3, 6});
  const auto u = operand({3}, 21), v = operand({4}, 22), w = operand({5}, 23);
  expect_close(mv::einsum("i,j,k->ijk", to_array(u), to_array(v), to_array(w)),
               host_einsum("i,j,k->ijk", {u, v, w}), {3, 4, 5});
  expect_close(mv::einsum("i,j,k->k", to_array(u), to_array(v), to_array(w)),
               host_einsum("i,j,k->k", {u, v, w}), {5});
  // int32 operands.
  const Array ints = mv::einsum("ij,jk,kl->il", mv::arange(4).reshape({2, 2}),
                                mv::arange(4).reshape({2, 2}), mv::ones({2, 2}, mv::DType::int32));
  EXPECT_EQ(ints.dtype(), mv::DType::int32);
  EXPECT_EQ(ints.to_host<int32_t>(),
            (std::vector<int32_t>{5, 5, 17, 17}));  // [[2,3],[6,11]] @ ones
}

TEST(JaxEinsum, ShardedOperandsGiveTheSameValues) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto a = operand({8, 16}, 24), b = operand({16, 8}, 25), c = operand({8, 4}, 26);
  const Array as = mv::device_put(to_array(a), mv::NamedSharding(mesh, P("x", "y")));
  const Array bs = mv::device_put(to_array(b), mv::NamedSharding(mesh, P("y", mv::None)));
  const Array cs = mv::device_put(to_array(c), mv::NamedSharding(mesh, P(mv::None, "y")));
  const Array r = mv::einsum("ij,jk,kl", as, bs, cs);
  expect_close(r, host_einsum("ij,jk,kl->il", {a, b, c}), {8, 4});
  EXPECT_EQ(r.sharding().device_ids().size(), 8u);
  const auto m = operand({8, 8}, 27);
  const Array ms = mv::device_put(to_array(m), mv::NamedSharding(mesh, P("x", "y")));
  std::vector<float> diag;
  for (int i = 0; i < 8; ++i) diag.push_back(m.values[static_cast<size_t>(i * 9)]);
  expect_close(mv::einsum("ii->i", ms), diag, {8});
  const auto e = operand({4, 8, 16}, 28);
  const Array es = mv::device_put(to_array(e), mv::NamedSharding(mesh, P("y", "x")));
  expect_close(mv::einsum("...ij,jk", es, bs), host_einsum("bij,jk->bik", {e, b}), {4, 8, 8});
  // Under jit the same.
  const auto f = mv::jit([](const Array& x, const Array& y, const Array& z) {
    return mv::einsum("ij,jk,kl", x, y, z);
  });
  expect_close(f(as, bs, cs), host_einsum("ij,jk,kl->il", {a, b, c}), {8, 4});
}

TEST(JaxEinsum, GradientsFlowThroughEveryForm) {
  // d/da sum(a @ b @ c) = ones @ (b @ c)^T: row sums of (b @ c) repeated for every row of a.
  const auto a = operand({3, 4}, 29), b = operand({4, 5}, 30), c = operand({5, 2}, 31);
  const auto g = mv::grad([](const Array& x, const Array& y, const Array& z) {
    return mv::sum(mv::einsum("ij,jk,kl", x, y, z));
  });
  const auto bc = host_einsum("jk,kl->jl", {b, c});
  std::vector<float> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      want.push_back(bc[static_cast<size_t>(j * 2)] + bc[static_cast<size_t>(j * 2 + 1)]);
  expect_close(g(to_array(a), to_array(b), to_array(c)), want, {3, 4});
  // d trace(m) / dm = identity.
  const auto gt = mv::grad([](const Array& m) { return mv::einsum("ii", m); });
  std::vector<float> eye(16, 0.f);
  for (int i = 0; i < 4; ++i) eye[static_cast<size_t>(i * 5)] = 1.f;
  expect_close(gt(to_array(operand({4, 4}, 32))), eye, {4, 4});
}

TEST(JaxEinsum, BadSubscriptsNameWhatIsWrong) {
  const Array m = mv::zeros({2, 3}), n = mv::zeros({3, 4});
  const auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  has(message_of([&] { mv::einsum("ij,jk->ik->i", m, n); }), "'->' appears twice");
  has(message_of([&] { mv::einsum("i.j,jk", m, n); }), "'.' that is not part of '...'");
  has(message_of([&] { mv::einsum("i1,jk", m, n); }), "'1', which is not a letter");
  has(message_of([&] { mv::einsum("ij,jk,kl", m, n); }), "3 operand subscripts for 2 operands");
  has(message_of([&] { mv::einsum("ijk,jk", m, n); }), "name 3 dimensions but it has shape (2, 3)");
  has(message_of([&] { mv::einsum("ij,jk->ii", m, n); }), "output label 'i' repeats");
  has(message_of([&] { mv::einsum("ij,jk->z", m, n); }), "output label 'z' appears in no operand");
  has(message_of([&] { mv::einsum("ii", m); }), "label 'i' has size 2 in one place and 3");
  has(message_of([&] { mv::einsum("ij,ik", m, n); }), "label 'i' has size 2 in one place and 3");
  has(message_of([&] {
        mv::einsum("...i,...i", mv::zeros({2, 3}), mv::zeros({4, 3}));
      }),
      "'...' stands for do not broadcast");
  has(message_of([&] { mv::einsum("...i...", m); }), "'...' twice");
  has(message_of([&] { mv::einsum("i-j", mv::zeros({2})); }), "not part of '->'");
  // Every message shows valid forms.
  has(message_of([&] { mv::einsum("ij,jk->z", m, n); }), "'ij,jk->ik'");
  // The runtime stays usable.
  expect_close(mv::einsum("ij,jk", mv::ones({2, 3}), mv::ones({3, 4})), std::vector<float>(8, 3.f),
               {2, 4});
}
