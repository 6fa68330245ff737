// Scan's backward pass reuses the forward pass's collective results (graph/saved_collectives.hpp)
// instead of communicating again: a Megatron all-reduce of a partial sum, an FSDP all-gather of
// a split weight and a ring ppermute inside shard_map, each in a scan body. Against the same
// loop unrolled (which the tape differentiates op by op and which communicates each forward
// collective once): the same gradients, and under jit the same bytes per device. The body's
// matmul products are saved the same way (no multiplication run twice).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"
#include "value_checks.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

// One layer: Megatron's MLP (w1 split by columns over `model`, w2 by rows: the second matmul is
// partial over `model`, summed where tanh reads it), then an FSDP weight `wf` split over `model`
// and gathered whole where it is used.
Array layer(const Array& h, const Array& w1, const Array& w2, const Array& wf,
            const mv::Mesh& mesh) {
  const Array mid = mv::tanh(mv::matmul(h, w1));
  const Array out = mv::tanh(mv::matmul(mid, w2) + h);
  return mv::tanh(mv::matmul(out, mv::with_sharding_constraint(wf, mv::NamedSharding(mesh, P()))));
}

Array scanned(const Array& h0, const Array& w1s, const Array& w2s, const Array& wfs,
              const mv::Mesh& mesh) {
  auto [last, ys] = mv::lax::scan(
      [&mesh](const Array& h, const std::vector<Array>& w) {
        const Array next = layer(h, w[0], w[1], w[2], mesh);
        return std::make_pair(next, next * next);
      },
      h0, std::vector<Array>{w1s, w2s, wfs});
  return mv::sum(last) + mv::sum(ys);
}

Array unrolled(const Array& h0, const Array& w1s, const Array& w2s, const Array& wfs,
               const mv::Mesh& mesh) {
  Array h = h0;
  std::vector<Array> ys;
  for (int64_t i = 0; i < w1s.shape()[0]; ++i) {
    h = layer(h, w1s[i], w2s[i], wfs[i], mesh);
    ys.push_back(h * h);
  }
  return mv::sum(h) + mv::sum(mv::stack(ys, 0));
}

uint64_t bytes_sent(const mv::Lowered& lowered) {
  return lowered.cost_analysis().bytes_communicated();
}

int count_lines(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expect_same(const std::vector<Array>& got, const std::vector<Array>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(what + ", gradient " + std::to_string(i));
    EXPECT_EQ(got[i].shape(), want[i].shape());
    expect_close(got[i], want[i].to_host<float>(), 1e-5f);
  }
}

struct Case {
  mv::Mesh mesh;
  std::string batch, model;
  int64_t layers, b, d, h;
};

void check(const Case& c) {
  SCOPED_TRACE("mesh " + c.mesh.to_string() + ", " + std::to_string(c.layers) + " layers");
  const int64_t n = c.layers;
  const Array h0 = placed_array(random_floats(static_cast<size_t>(c.b * c.d), 1), {c.b, c.d},
                                mv::NamedSharding(c.mesh, c.batch.empty() ? P() : P(c.batch)));
  const Array w1s =
      placed_array(random_floats(static_cast<size_t>(n * c.d * c.h), 2, -0.4f, 0.4f), {n, c.d, c.h},
                   mv::NamedSharding(c.mesh, P(mv::None, mv::None, c.model)));
  const Array w2s = placed_array(random_floats(static_cast<size_t>(n * c.h * c.d), 3, -0.4f, 0.4f),
                                 {n, c.h, c.d}, mv::NamedSharding(c.mesh, P(mv::None, c.model)));
  const Array wfs = placed_array(random_floats(static_cast<size_t>(n * c.d * c.d), 4, -0.4f, 0.4f),
                                 {n, c.d, c.d}, mv::NamedSharding(c.mesh, P(mv::None, c.model)));
  const mv::Mesh mesh = c.mesh;
  const auto scan_grad = mv::grad([mesh](const Array& a, const Array& b, const Array& w,
                                         const Array& f) { return scanned(a, b, w, f, mesh); },
                                  std::vector<int>{0, 1, 2, 3});
  const auto unrolled_grad = mv::grad([mesh](const Array& a, const Array& b, const Array& w,
                                             const Array& f) { return unrolled(a, b, w, f, mesh); },
                                      std::vector<int>{0, 1, 2, 3});
  const std::vector<Array> want = unrolled_grad(h0, w1s, w2s, wfs);
  expect_same(scan_grad(h0, w1s, w2s, wfs), want, "eager");
  const auto jitted_scan = mv::jit(scan_grad);
  const auto jitted_unrolled = mv::jit(unrolled_grad);
  expect_same(jitted_scan(h0, w1s, w2s, wfs), want, "jit");
  expect_same(jitted_scan(h0, w1s, w2s, wfs), want, "jit, replayed");
  // Each forward collective sent once per layer, as the unrolled loop sends it.
  const mv::Lowered lowered = jitted_scan.lower(h0, w1s, w2s, wfs);
  EXPECT_EQ(bytes_sent(lowered), bytes_sent(jitted_unrolled.lower(h0, w1s, w2s, wfs)))
      << lowered.as_text();
  // The backward pass's forward run of the body: the all-reduce and the all-gather handed back.
  EXPECT_GE(count_lines(lowered.as_text(), "saved for its backward pass"), 2) << lowered.as_text();
}

}  // namespace

TEST(ScanSavedCollectives, MegatronAndFsdpCollectivesAreSentOncePerLayer) {
  check({mv::make_mesh({2, 4}, {"data", "model"}), "data", "model", 2, 8, 8, 12});
  check({mv::make_mesh({2, 4}, {"data", "model"}), "data", "model", 5, 6, 4, 8});
  // An odd mesh, odd sizes, one layer.
  check({mv::make_mesh({3}, {"x"}, {}, std::vector<int>{0, 1, 2}), "", "x", 1, 5, 3, 9});
  check({mv::make_mesh({3}, {"x"}, {}, std::vector<int>{0, 1, 2}), "", "x", 3, 5, 6, 9});
}

// Ring attention's shape: each iteration shifts a block around the ring with ppermute inside
// shard_map, and the scan's backward pass gets the shifted blocks from the forward pass.
TEST(ScanSavedCollectives, PpermuteInsideShardMapIsNotSentAgain) {
  for (const int devices : {8, 3}) {
    std::vector<int> ids;
    for (int i = 0; i < devices; ++i) ids.push_back(i);
    const mv::Mesh mesh = mv::make_mesh({devices}, {"i"}, {}, ids);
    std::vector<std::pair<int, int>> ring;
    for (int i = 0; i < devices; ++i) ring.emplace_back(i, (i + 1) % devices);
    const auto shift = mv::shard_map([ring](const Array& x) { return mv::ppermute(x, "i", ring); },
                                     mesh, {P("i")}, P("i"));
    const auto step = [shift](const Array& h, const Array& w) {
      return mv::tanh(shift(h) * w + h);
    };
    const auto scan_loss = [step](const Array& h0, const Array& ws) {
      auto [last, ys] = mv::lax::scan(
          [step](const Array& h, const Array& w) {
            const Array next = step(h, w);
            return std::make_pair(next, next * next);
          },
          h0, ws);
      return mv::sum(last) + mv::sum(ys);
    };
    const auto unrolled_loss = [step](const Array& h0, const Array& ws) {
      Array h = h0;
      std::vector<Array> ys;
      for (int64_t i = 0; i < ws.shape()[0]; ++i) {
        h = step(h, ws[i]);
        ys.push_back(h * h);
      }
      return mv::sum(h) + mv::sum(mv::stack(ys, 0));
    };
    const int64_t rows = 2 * devices, cols = 5, layers = 4;
    const Array h0 = placed_array(random_floats(static_cast<size_t>(rows * cols), 11), {rows, cols},
                                  mv::NamedSharding(mesh, P("i")));
    const Array ws = placed_array(random_floats(static_cast<size_t>(layers * rows * cols), 12),
                                  {layers, rows, cols}, mv::NamedSharding(mesh, P(mv::None, "i")));
    const auto g = mv::grad(scan_loss, std::vector<int>{0, 1});
    const auto gu = mv::grad(unrolled_loss, std::vector<int>{0, 1});
    const std::vector<Array> want = gu(h0, ws);
    expect_same(g(h0, ws), want, "eager");
    const auto jg = mv::jit(g);
    expect_same(jg(h0, ws), want, "jit");
    const mv::Lowered lowered = jg.lower(h0, ws);
    EXPECT_EQ(bytes_sent(lowered), bytes_sent(mv::jit(gu).lower(h0, ws))) << lowered.as_text();
    EXPECT_EQ(
        count_lines(lowered.as_text(), "collective-permute (ppermute)"),
        2 * count_lines(lowered.as_text(), "ppermute ('i',): the scan's forward pass's result"))
        << lowered.as_text();
  }
}

// A scan in the body (its own loop replays its recording: its collectives are its own to save)
// or a checkpointed function in the body (remat: its collectives run again when its gradient is
// taken): the gradients are the unrolled loop's.
TEST(ScanSavedCollectives, NestedScanOrCheckpointInTheBody) {
  const mv::Mesh mesh = mv::make_mesh({2, 4}, {"data", "model"});
  using Body = std::function<Array(const Array&, const Array&, const Array&)>;
  const Body inner = [](const Array& h, const Array& w1, const Array& w2) {
    auto [last, none] = mv::lax::scan(
        [w1, w2](const Array& c, std::nullopt_t) {
          return std::make_pair(mv::tanh(mv::matmul(mv::tanh(mv::matmul(c, w1)), w2) + c),
                                std::nullopt);
        },
        h, std::nullopt, 3);
    return last;
  };
  const Body remat = mv::checkpoint([](const Array& h, const Array& w1, const Array& w2) {
    return mv::tanh(mv::matmul(mv::tanh(mv::matmul(h, w1)), w2) * 0.5f + h);
  });
  for (const bool nested : {true, false}) {
    const Body& body = nested ? inner : remat;
    const auto scan_loss = [&](const Array& h0, const Array& w1s, const Array& w2s) {
      auto [last, ys] = mv::lax::scan(
          [&](const Array& h, const std::vector<Array>& w) {
            const Array next = body(h, w[0], w[1]);
            return std::make_pair(next, next);
          },
          h0, std::vector<Array>{w1s, w2s});
      return mv::sum(last * last) + mv::sum(ys);
    };
    const auto unrolled_loss = [&](const Array& h0, const Array& w1s, const Array& w2s) {
      Array h = h0;
      std::vector<Array> ys;
      for (int64_t i = 0; i < w1s.shape()[0]; ++i) {
        h = body(h, w1s[i], w2s[i]);
        ys.push_back(h);
      }
      return mv::sum(h * h) + mv::sum(mv::stack(ys, 0));
    };
    const int64_t n = 3, b = 4, d = 4, hid = 8;
    const Array h0 = placed_array(random_floats(static_cast<size_t>(b * d), 21), {b, d},
                                  mv::NamedSharding(mesh, P("data")));
    const Array w1s =
        placed_array(random_floats(static_cast<size_t>(n * d * hid), 22, -0.5f, 0.5f), {n, d, hid},
                     mv::NamedSharding(mesh, P(mv::None, mv::None, "model")));
    const Array w2s = placed_array(random_floats(static_cast<size_t>(n * hid * d), 23, -0.5f, 0.5f),
                                   {n, hid, d}, mv::NamedSharding(mesh, P(mv::None, "model")));
    const std::vector<Array> want =
        mv::grad(unrolled_loss, std::vector<int>{0, 1, 2})(h0, w1s, w2s);
    expect_same(mv::grad(scan_loss, std::vector<int>{0, 1, 2})(h0, w1s, w2s), want, "eager");
    expect_same(mv::jit(mv::grad(scan_loss, std::vector<int>{0, 1, 2}))(h0, w1s, w2s), want, "jit");
    // The checkpointed function's collectives: once in the forward pass, once more where its
    // gradient runs it again, as unrolled. The nested scan's are not the outer body's to save
    // (its loop replays them): the outer backward pass runs them again (README, Status).
    const uint64_t scan_bytes =
        bytes_sent(mv::jit(mv::grad(scan_loss, std::vector<int>{0, 1, 2})).lower(h0, w1s, w2s));
    const uint64_t unrolled_bytes =
        bytes_sent(mv::jit(mv::grad(unrolled_loss, std::vector<int>{0, 1, 2})).lower(h0, w1s, w2s));
    if (nested)
      EXPECT_GT(scan_bytes, unrolled_bytes);
    else
      EXPECT_EQ(scan_bytes, unrolled_bytes);
  }
}

// The body's matmuls too: the backward pass's run of the body's forward pass gets each product
// back from the forward pass (on one device: nothing to communicate) and the gradients stay those of the
// unrolled loop, at layer counts 1 to 4 and sizes not a multiple of 4.
TEST(ScanSavedCollectives, MatmulProductsAreNotComputedAgain) {
  for (const int64_t n : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(n) + " layers");
    const int64_t b = 5, d = 7;
    const Array h0 = mv::array(random_floats(static_cast<size_t>(b * d), 11), mv::Shape{b, d});
    const Array ws = mv::array(random_floats(static_cast<size_t>(n * d * d), 12, -0.5f, 0.5f), mv::Shape{n, d, d});
    const Array vs = mv::array(random_floats(static_cast<size_t>(n * d * d), 13, -0.5f, 0.5f), mv::Shape{n, d, d});
    auto body = [](const Array& h, const Array& w, const Array& v) {
      const Array a = mv::tanh(mv::matmul(h, w));
      return mv::tanh(mv::matmul(a, v) + mv::matmul(h, mv::transpose(v)));
    };
    const auto scan_grad = mv::jit(mv::grad(
        [body](const Array& h, const Array& w, const Array& v) {
          auto [last, ys] = mv::lax::scan(
              [body](const Array& c, const std::vector<Array>& x) {
                const Array next = body(c, x[0], x[1]);
                return std::make_pair(next, next * 0.5f);
              },
              h, std::vector<Array>{w, v});
          return mv::sum(last) + mv::sum(ys);
        },
        std::vector<int>{0, 1, 2}));
    const auto unrolled_grad = mv::jit(mv::grad(
        [body, n](const Array& h, const Array& w, const Array& v) {
          Array c = h, total = mv::zeros({});
          for (int64_t i = 0; i < n; ++i) {
            c = body(c, w[i], v[i]);
            total = total + mv::sum(c * 0.5f);
          }
          return mv::sum(c) + total;
        },
        std::vector<int>{0, 1, 2}));
    expect_same(scan_grad(h0, ws, vs), unrolled_grad(h0, ws, vs), "jit");
    expect_same(scan_grad(h0, ws, vs), unrolled_grad(h0, ws, vs), "jit, replayed");
    const std::string text = scan_grad.lower(h0, ws, vs).as_text();
    EXPECT_EQ(count_lines(text, "(nothing computed)"), 3) << text;
  }
}
