// Adversarial tests of reduction fusion (kernels/reduce_fused.cpp), as an outside tester would
// write them: reductions (sum / max / min / mean and what is built on them) of a pending
// elementwise program computing the program inside the reduction, claimed equal bit for bit to
// materializing the program first and reducing it. Each check compares against the unfused path
// (detail::materialized first) bit for bit and against a host reference in double.
#include "fusion_checks.hpp"

// ---------------------------------------------------------------------------------------------
// 1. Reduction fusion: sizes, shapes, axes.

TEST(FusionAdversarial, OddRowLengthsAndManyRows) {
  // Rows of 1, 3, 5, 7, 13 elements; around a pass (4096) and two passes; multiples of 4 (vec4)
  // and not; many short rows.
  const std::vector<mv::Shape> shapes = {{1, 1},    {3, 1},    {5, 3},    {7, 5},    {3, 7},    {2, 13},
                                         {1, 4097}, {2, 4099}, {1, 8193}, {3, 4096}, {1, 8192}, {2, 12},
                                         {1001, 3}, {513, 4},  {257, 8}};
  uint32_t seed = 100;
  for (const mv::Shape& shape : shapes) {
    const int64_t rows = shape[0], n = shape[1];
    const auto xv = random_values(size_of(shape), seed++);
    const auto cv = random_values(rows, seed++);    // a column (rows, 1)
    const auto bv = random_values(n, seed++, -2, 2);  // a row (n)
    const float sv = 0.75f;
    const mv::Array x = dev(xv, shape), c = dev(cv, {rows, 1}), b = dev(bv, {n});
    const mv::Array s = dev(std::vector<float>{sv}, {});  // a 0-d array
    const Host hx = host_of(xv, shape), hc = host_of(cv, {rows, 1}), hb = host_of(bv, {n}), hs = host_of(std::vector<float>{sv}, {});
    const std::string where = "shape " + str(shape);
    // A cheap program over every broadcast kind.
    const Program cheap = [&] { return x * s - c + b * 2.f; };
    const Host hcheap = host_eval({hx, hs, hc, hb}, [](const std::vector<double>& a) { return a[0] * a[1] - a[2] + a[3] * 2; });
    // A costly one (stored by the reduction).
    const Program costly = [&] { return mv::exp(x * 0.0625f - c) / (mv::abs(b) + 1.f); };
    const Host hcostly = host_eval({hx, hc, hb}, [](const std::vector<double>& a) { return std::exp(a[0] * 0.0625 - a[1]) / (std::abs(a[2]) + 1); });
    for (const Op op : kAllOps) {
      check_reduction(cheap, hcheap, op, {1}, false, where + " cheap");
      check_reduction(costly, hcostly, op, {-1}, op == Op::max, where + " costly", 1e-5);
    }
    // All axes (one row over both dimensions).
    check_reduction(cheap, hcheap, Op::sum, {}, false, where + " cheap all");
  }
}

TEST(FusionAdversarial, ThreeAndFourDimensionalShapesAndAxes) {
  struct Case {
    mv::Shape shape;
    std::vector<int> axes;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 7}, {3}},        {{2, 3, 5, 7}, {2, 3}},    {{2, 3, 5, 7}, {-1, -2}},  {{2, 3, 5, 7}, {1, 2, 3}},
      {{2, 3, 5, 7}, {}},         {{2, 3, 5, 7}, {0, 1, 2, 3}}, {{3, 4, 4}, {2}},       {{3, 4, 4}, {1, 2}},
      {{3, 1, 8}, {1, 2}},        {{3, 5, 1}, {2}},          {{3, 5, 1}, {1, 2}},       {{1, 1, 1, 1}, {}},
      {{2, 2, 2, 4100}, {2, 3}},  {{4, 1, 3}, {-1}},         // non-trailing (the old path):
      {{3, 5, 7}, {0}},           {{3, 5, 7}, {1}},          {{3, 5, 7}, {0, 2}},       {{2, 3, 5, 7}, {0, 3}},
      {{2, 3, 5, 8}, {1}},        {{4, 8}, {0}},
  };
  uint32_t seed = 300;
  for (const Case& cs : cases) {
    const mv::Shape shape = cs.shape;
    const std::vector<int> axes = cs.axes;
    const size_t rank = shape.size();
    const auto xv = random_values(size_of(shape), seed++);
    // Size-1 dims in the middle: a (d0, 1, ..., 1, dlast) operand.
    mv::Shape mid(rank, 1);
    mid[0] = shape[0];
    mid[rank - 1] = shape[rank - 1];
    const auto mv_ = random_values(size_of(mid), seed++);
    mv::Shape col = shape;  // (..., 1)
    col[rank - 1] = 1;
    const auto cv = random_values(size_of(col), seed++);
    const mv::Array x = dev(xv, shape), m = dev(mv_, mid), c = dev(cv, col);
    const Host hx = host_of(xv, shape), hm = host_of(mv_, mid), hc = host_of(cv, col);
    const Program prog = [&] { return (x - m) * 0.5f + c; };
    const Host hp = host_eval({hx, hm, hc}, [](const std::vector<double>& a) { return (a[0] - a[1]) * 0.5 + a[2]; });
    const Program costly = [&] { return mv::sqrt(mv::abs(x * m) + 1.f) - c; };
    const Host hq = host_eval({hx, hm, hc}, [](const std::vector<double>& a) { return std::sqrt(std::abs(a[0] * a[1]) + 1) - a[2]; });
    for (const Op op : kAllOps)
      for (const bool keepdims : {false, true}) {
        check_reduction(prog, hp, op, axes, keepdims, "shape " + str(shape) + " cheap");
        if (op != Op::mean) check_reduction(costly, hq, op, axes, keepdims, "shape " + str(shape) + " costly", 1e-5);
      }
  }
}

TEST(FusionAdversarial, Int32AndBoolPrograms) {
  for (const mv::Shape& shape : std::vector<mv::Shape>{{3, 7}, {2, 8}, {1, 4099}, {2, 3, 4}, {5, 1}, {2, 4096}}) {
    const auto av = random_ints(size_of(shape), 7 + static_cast<uint32_t>(shape.back()));
    const auto bv = random_ints(shape.back(), 8 + static_cast<uint32_t>(shape.back()), -5, 5);
    const mv::Array a = dev(av, shape), b = dev(bv, {shape.back()});
    const Host ha = host_of(av, shape), hb = host_of(bv, {shape.back()});
    const std::string where = "int32 " + str(shape);
    const Program prog = [&] { return a * 3 - b + 1; };
    const Host hp = host_eval({ha, hb}, [](const std::vector<double>& v) { return v[0] * 3 - v[1] + 1; });
    for (const Op op : kAllOps) check_reduction(prog, hp, op, {-1}, false, where);
    // The sum over all of a last-axis int program; bool counts.
    check_reduction(prog, hp, Op::sum, {}, true, where);
    const Program cmp = [&] { return a > b * 100; };
    const Host hcmp = host_eval({ha, hb}, [](const std::vector<double>& v) { return v[0] > v[1] * 100 ? 1.0 : 0.0; });
    check_reduction(cmp, hcmp, Op::sum, {-1}, false, where + " bool count");
    check_reduction(cmp, hcmp, Op::mean, {-1}, false, where + " bool mean");
    check_reduction(cmp, hcmp, Op::max, {-1}, false, where + " bool max");
    // A mixed program: an int comparison selecting floats.
    const Program sel = [&] { return mv::where(a > 0, mv::astype(a, mv::DType::float32) * 0.5f, -1.5f); };
    const Host hsel = host_eval({ha}, [](const std::vector<double>& v) { return v[0] > 0 ? v[0] * 0.5 : -1.5; });
    for (const Op op : kAllOps) check_reduction(sel, hsel, op, {-1}, false, where + " where");
  }
  // int32 sums wrap (as numpy's int32 sum does), fused or not.
  std::vector<int32_t> big(4099, 0x3fffffff);
  const mv::Array x = dev(big, {1, 4099});
  const mv::Array fused = mv::sum(x * 2 + 1, {1});
  const mv::Array p = x * 2 + 1;
  mv::detail::materialized(p);
  expect_same_bits<int32_t>(fused, mv::sum(p, {1}), "int32 wrap");
  int32_t want = 0;
  for (int i = 0; i < 4099; ++i) want = static_cast<int32_t>(static_cast<uint32_t>(want) + 0x7fffffffu);
  EXPECT_EQ(fused.to_host<int32_t>()[0], want);
  // any / all of a pending comparison.
  const auto fv = random_values(3 * 13, 55);
  const mv::Array f = dev(fv, {3, 13});
  const auto anyv = mv::astype(mv::any(f > 0.9f, {1}), mv::DType::int32).to_host<int32_t>();
  const auto allv = mv::astype(mv::all(f > -100.f, {1}), mv::DType::int32).to_host<int32_t>();
  for (int r = 0; r < 3; ++r) {
    bool w = false;
    for (int c = 0; c < 13; ++c) w = w || fv[static_cast<size_t>(r * 13 + c)] > 0.9f;
    EXPECT_EQ(anyv[static_cast<size_t>(r)], w ? 1 : 0);
    EXPECT_EQ(allv[static_cast<size_t>(r)], 1);
  }
}

TEST(FusionAdversarial, SixteenBitInputsFallBack) {
  const mv::Shape shape{3, 13};
  const auto xv = random_values(size_of(shape), 77, -3, 3);
  std::vector<mv::bfloat16> bv;
  std::vector<mv::float16> hv;
  for (float f : xv) {
    bv.emplace_back(f);
    hv.emplace_back(f);
  }
  const mv::Array xb = mv::array(std::span<const mv::bfloat16>(bv), shape);
  const mv::Array xh = mv::array(std::span<const mv::float16>(hv), shape);
  const mv::Array y = dev(random_values(size_of(shape), 78), shape);
  // float32 programs reading 16-bit inputs, and 16-bit programs.
  const std::vector<std::pair<std::string, Program>> programs = {
      {"astype(bf16) * y", [&] { return mv::astype(xb, mv::DType::float32) * y; }},
      {"astype(f16) + 1", [&] { return mv::astype(xh, mv::DType::float32) + 1.f; }},
      {"bf16 * 2", [&] { return xb * 2.f; }},
      {"f16 - f16", [&] { return xh - xh * 0.5f; }},
  };
  for (const auto& [name, program] : programs)
    for (const Op op : kAllOps) {
      const mv::Array unfused = program();
      mv::detail::materialized(unfused);
      const mv::Array want = apply(op, unfused, {1}, false);
      const mv::Array got = apply(op, program(), {1}, false);
      ASSERT_EQ(got.dtype(), want.dtype()) << name;
      if (got.dtype() == mv::DType::float32) {
        expect_same_bits<float>(got, want, name + " " + name_of(op));
      } else {
        const auto g = mv::astype(got, mv::DType::float32).to_host<float>(), w = mv::astype(want, mv::DType::float32).to_host<float>();
        ASSERT_EQ(g.size(), w.size());
        for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(same_bits(g[i], w[i])) << name << " " << name_of(op) << " " << i;
      }
    }
}

TEST(FusionAdversarial, NaNInfSignedZeroAndSubnormals) {
  const float den = std::numeric_limits<float>::denorm_min();
  const float small = std::numeric_limits<float>::min();  // smallest normal
  // Rows built to hit each special case; lengths 8 (vec4), 7 (scalar) and 4099 (two passes).
  const std::vector<std::vector<float>> rows = {
      {1, kNaN, 3, 4, 5, 6, 7, 8},
      {kNaN, 1, 2, 3, 4, 5, 6, 7},
      {1, 2, 3, 4, 5, 6, 7, kNaN},
      {kInf, 1, 2, 3, 4, 5, 6, 7},
      {kInf, -kInf, 2, 3, 4, 5, 6, 7},
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},
      {-0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f, -0.f},
      {-0.f, 0.f, -0.f, 0.f, -0.f, 0.f, -0.f, 0.f},
      {0.f, -0.f, 0.f, -0.f, 0.f, -0.f, 0.f, -0.f},
      {den, den, den, den, den, den, den, den},
      {small, -small * 0.5f, den * 3, -den, small * 0.25f, den, -small * 0.125f, 0},
      {3e38f, 3e38f, -3e38f, 1, 2, 3, 4, 5},
  };
  for (const int64_t n : {8, 7, 4099}) {
    std::vector<float> v;
    for (const auto& r : rows)
      for (int64_t i = 0; i < n; ++i) v.push_back(i < 8 ? r[static_cast<size_t>(i)] : (r[0] == -0.f && !std::signbit(r[0]) ? 0.f : r[static_cast<size_t>(i % 8)]));
    const int64_t R = static_cast<int64_t>(rows.size());
    const mv::Shape shape{R, n};
    const mv::Array x = dev(v, shape);
    const Host hx = host_of(v, shape);
    const std::string where = "specials n=" + std::to_string(n);
    const std::vector<std::tuple<std::string, Program, std::function<double(double)>>> programs = {
        {"x * 1", [&] { return x * 1.f; }, [](double a) { return a; }},
        {"-x", [&] { return -x; }, [](double a) { return -a; }},
        {"x + -0.0", [&] { return x + (-0.f); }, [](double a) { return a; }},
        {"x * 0.5", [&] { return x * 0.5f; }, [](double a) { return static_cast<double>(static_cast<float>(a) * 0.5f); }},
        {"maximum(x, -0.0)", [&] { return mv::maximum(x, -0.f); }, [](double a) { return std::isnan(a) ? a : std::max(a, 0.0); }},
        {"exp(x) - 1", [&] { return mv::exp(x) - 1.f; }, [](double a) { return static_cast<double>(std::exp(static_cast<float>(a)) - 1.f); }},
    };
    for (const auto& [name, program, f] : programs) {
      const Host h = host_eval({hx}, [f = f](const std::vector<double>& a) { return f(a[0]); });
      for (const Op op : kAllOps) {
        // The host reference in double loses float32 overflow (3e38 + 3e38 = inf); compare bits
        // only there, and the host elsewhere.
        const mv::Array unfused = program();
        mv::detail::materialized(unfused);
        const mv::Array want = apply(op, unfused, {1}, false);
        const mv::Array got = apply(op, program(), {1}, false);
        expect_same_bits<float>(got, want, where + " " + name + " " + name_of(op));
      }
      // Host check (in double), leaving out the last row, whose float32 sum overflows.
      for (const Op op : kAllOps) {
        const mv::Array got = apply(op, program(), {1}, false);
        const HostReduced ref = host_reduce(h, op, {1});
        const auto g = got.to_host<float>();
        for (size_t r = 0; r + 1 < g.size(); ++r) {
          const double w = ref.value[r];
          const std::string at = where + " " + name + " " + name_of(op) + " row " + std::to_string(r) + " (host)";
          if (std::isnan(w)) EXPECT_TRUE(std::isnan(g[r])) << at << ": " << g[r];
          else if (std::isinf(w)) EXPECT_EQ(g[r], w) << at;
          else EXPECT_NEAR(g[r], w, 1e-6 * ref.magnitude[r] + 1e-6 * std::abs(w) + 1e-46) << at;
        }
      }
    }
  }
  // -0.0 rows: max and min keep the first of equal zeros, sums give +0.0.
  std::vector<float> z = {-0.f, 0.f, -0.f, 0.f, 0.f, -0.f, 0.f, -0.f};
  const mv::Array x = dev(z, {2, 4});
  const auto mx = mv::max(x * 1.f, {1}).to_host<float>();
  const auto mn = mv::min(x * 1.f, {1}).to_host<float>();
  const auto sm = mv::sum(x * 1.f, {1}).to_host<float>();
  EXPECT_TRUE(std::signbit(mx[0]));  // the first of -0.0, 0.0
  EXPECT_FALSE(std::signbit(mx[1]));
  EXPECT_FALSE(std::signbit(sm[0]));
  (void)mn;
}

TEST(FusionAdversarial, BroadcastInputsOfEveryKind) {
  const mv::Shape shape{3, 4, 8};
  uint32_t seed = 500;
  const auto xv = random_values(size_of(shape), seed++);
  const mv::Array x = dev(xv, shape);
  const Host hx = host_of(xv, shape);
  const std::vector<mv::Shape> others = {{},        {1},       {8},       {1, 8},    {4, 1},    {1, 1, 1},
                                         {3, 1, 1}, {1, 4, 1}, {3, 1, 8}, {1, 4, 8}, {3, 4, 1}, {4, 8}};
  for (const mv::Shape& os : others) {
    const auto ov = random_values(size_of(os), seed++);
    const mv::Array o = dev(ov, os);
    const Host ho = host_of(ov, os);
    const Program prog = [&] { return x * o + o; };
    const Host hp = host_eval({hx, ho}, [](const std::vector<double>& a) { return a[0] * a[1] + a[1]; });
    // The other operand first, so it is input 0 of the program.
    const Program flipped = [&] { return o - x; };
    const Host hf = host_eval({ho, hx}, [](const std::vector<double>& a) { return a[0] - a[1]; });
    for (const std::vector<int>& axes : std::vector<std::vector<int>>{{2}, {1, 2}, {}, {0}}) {
      check_reduction(prog, hp, Op::sum, axes, false, "x * o + o, o " + str(os));
      check_reduction(flipped, hf, Op::max, axes, true, "o - x, o " + str(os));
    }
  }
  // An explicitly broadcast pending operand, and a program whose only array is broadcast.
  const auto rv = random_values(8, seed++);
  const mv::Array r = dev(rv, {8});
  const Host hr = host_of(rv, {8});
  const Program bcast = [&] { return mv::broadcast_to(r * 2.f, shape) + 1.f; };
  const Host hb = host_eval({hx, hr}, [](const std::vector<double>& a) { return a[1] * 2 + 1 + 0 * a[0]; });
  for (const Op op : kAllOps) check_reduction(bcast, hb, op, {2}, false, "broadcast_to(pending)");
  // A transposed pending program reduced over its last axis.
  const Program tr = [&] { return mv::transpose(x * 3.f, {0, 2, 1}); };
  Host ht{{}, {3, 8, 4}};
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 8; ++b)
      for (int64_t c = 0; c < 4; ++c) ht.v.push_back(hx.v[static_cast<size_t>((a * 4 + c) * 8 + b)] * 3);
  for (const Op op : kAllOps) check_reduction(tr, ht, op, {2}, false, "transpose(pending)");
  // A reshaped pending program.
  const Program rs = [&] { return mv::reshape(x - 1.f, {12, 8}); };
  Host hrs = host_eval({hx}, [](const std::vector<double>& a) { return a[0] - 1; });
  hrs.shape = {12, 8};
  for (const Op op : kAllOps) check_reduction(rs, hrs, op, {1}, false, "reshape(pending)");
}

// ---------------------------------------------------------------------------------------------
// 2. Sharded inputs.

TEST(FusionAdversarial, ShardedInputsOverMeshesAndPartialSums) {
  struct MeshCase {
    std::vector<int> sizes;
    std::vector<std::string> names;
  };
  const std::vector<MeshCase> meshes = {{{8}, {"x"}}, {{4, 2}, {"x", "y"}}, {{2, 2, 2}, {"x", "y", "z"}}};
  uint32_t seed = 700;
  for (const MeshCase& mc : meshes) {
    const mv::Mesh mesh = mv::make_mesh(mc.sizes, mc.names);
    const mv::Shape shape{16, 24};
    const auto xv = random_values(size_of(shape), seed++);
    const auto bv = random_values(24, seed++);
    const auto cv = random_values(16, seed++);
    const Host hx = host_of(xv, shape), hb = host_of(bv, {24}), hc = host_of(cv, {16, 1});
    std::vector<std::pair<std::string, mv::PartitionSpec>> specs = {
        {"rows", P("x")}, {"cols", P(mv::None, "x")}, {"replicated", P()}};
    if (mc.names.size() >= 2) {
      specs.push_back({"x,y", P("x", "y")});
      specs.push_back({"y,x", P("y", "x")});
      specs.push_back({"(x,y) cols", P(mv::None, {"x", "y"})});
    }
    if (mc.names.size() == 3) specs.push_back({"(x,z),y", P({"x", "z"}, "y")});
    for (const auto& [sname, spec] : specs) {
      const mv::NamedSharding sh(mesh, spec);
      const mv::Array x = mv::device_put(dev(xv, shape), sh);
      const mv::Array b = mv::device_put(dev(bv, {24}), mv::NamedSharding(mesh, P(spec.size() > 1 ? spec[1] : mv::SpecEntry())));
      const mv::Array c = mv::device_put(dev(cv, {16, 1}), mv::NamedSharding(mesh, P(spec.size() > 0 ? spec[0] : mv::SpecEntry())));
      const std::string where = "mesh " + str(mc.sizes) + " " + sname;
      const Program prog = [&] { return x * b - c; };
      const Host hp = host_eval({hx, hb, hc}, [](const std::vector<double>& a) { return a[0] * a[1] - a[2]; });
      const Program costly = [&] { return mv::exp(x - c) * b; };
      const Host hq = host_eval({hx, hc, hb}, [](const std::vector<double>& a) { return std::exp(a[0] - a[1]) * a[2]; });
      for (const Op op : kAllOps)
        for (const std::vector<int>& axes : std::vector<std::vector<int>>{{1}, {0}, {}}) {
          check_reduction(prog, hp, op, axes, false, where);
          if (axes.size() == 1 && op != Op::mean) check_reduction(costly, hq, op, axes, true, where + " costly", 1e-5);
        }
      // A partial sum (over a sharded axis) used in a further fused reduction.
      const mv::Array s = mv::sum(x * 2.f, {0});  // partial where rows are sharded
      const mv::Array s_unfused = [&] {
        const mv::Array p = x * 2.f;
        mv::detail::materialized(p);
        return mv::sum(p, {0});
      }();
      expect_same_bits<float>(mv::sum(s * b + 1.f, {0}), mv::sum([&] {
                                const mv::Array p = s_unfused * b + 1.f;
                                mv::detail::materialized(p);
                                return p;
                              }(), {0}), where + " sum of a partial sum's program");
    }
  }
}

TEST(FusionAdversarial, UnevenShardingIsAnErrorAndTheRuntimeStaysUsable) {
  const mv::Mesh mesh = mv::make_mesh({8}, {"x"});
  expect_error([&] { (void)mv::device_put(mv::ones({13, 4}), mv::NamedSharding(mesh, P("x"))); }, "");
  expect_runtime_usable();
}

// ---------------------------------------------------------------------------------------------
// 3. Composite reductions, reuse of a pending array, many inputs.

TEST(FusionAdversarial, CompositesAgainstHost) {
  for (const mv::Shape& shape : std::vector<mv::Shape>{{5, 7}, {3, 8}, {2, 4099}, {2, 3, 12}}) {
    const int64_t n = shape.back();
    const auto xv = random_values(size_of(shape), 900 + static_cast<uint32_t>(n), -3, 3);
    const auto gv = random_values(n, 901, -1, 1);
    const mv::Array x = dev(xv, shape), g = dev(gv, {n});
    const int64_t rows = size_of(shape) / n;
    const auto sm = mv::nn::softmax(x * 2.f + 1.f).to_host<float>();
    const auto ls = mv::nn::log_softmax(x * 2.f + 1.f).to_host<float>();
    const auto lse = mv::nn::logsumexp(x * 2.f + 1.f, {-1}).to_host<float>();
    const auto ln = mv::nn::layer_norm(x * 3.f - 1.f, g, g * 0.5f).to_host<float>();
    const auto va = mv::var(x * 0.5f + 2.f, {-1}).to_host<float>();
    const auto sd = mv::std(x * 0.5f + 2.f, {-1}, true).to_host<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = nullptr;
      std::vector<double> y(static_cast<size_t>(n)), z(static_cast<size_t>(n)), w(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const double xi = xv[static_cast<size_t>(r * n + i)];
        y[static_cast<size_t>(i)] = xi * 2 + 1;
        z[static_cast<size_t>(i)] = xi * 3 - 1;
        w[static_cast<size_t>(i)] = xi * 0.5 + 2;
      }
      (void)row;
      const double mx = *std::max_element(y.begin(), y.end());
      double se = 0;
      for (double v : y) se += std::exp(v - mx);
      const double l = mx + std::log(se);
      EXPECT_NEAR(lse[static_cast<size_t>(r)], l, 1e-5 * (1 + std::abs(l))) << str(shape) << " logsumexp row " << r;
      double mz = 0, vz = 0, mw = 0, vw = 0;
      for (double v : z) mz += v;
      for (double v : w) mw += v;
      mz /= static_cast<double>(n);
      mw /= static_cast<double>(n);
      for (double v : z) vz += (v - mz) * (v - mz);
      for (double v : w) vw += (v - mw) * (v - mw);
      vz /= static_cast<double>(n);
      vw /= static_cast<double>(n);
      EXPECT_NEAR(va[static_cast<size_t>(r)], vw, 1e-5 * (1 + vw)) << str(shape) << " var row " << r;
      EXPECT_NEAR(sd[static_cast<size_t>(r)], std::sqrt(vw), 1e-5 * (1 + vw)) << str(shape) << " std row " << r;
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = static_cast<size_t>(r * n + i);
        const double yi = y[static_cast<size_t>(i)];
        EXPECT_NEAR(sm[k], std::exp(yi - l), 1e-5) << str(shape) << " softmax " << k;
        EXPECT_NEAR(ls[k], yi - l, 1e-4 * (1 + std::abs(yi - l))) << str(shape) << " log_softmax " << k;
        const double gi = gv[static_cast<size_t>(i)];
        const double want = (z[static_cast<size_t>(i)] - mz) / std::sqrt(vz + 1e-6) * gi + gi * 0.5;
        EXPECT_NEAR(ln[k], want, 1e-4 * (1 + std::abs(want))) << str(shape) << " layer_norm " << k;
        if (HasFailure()) return;
      }
    }
  }
}

TEST(FusionAdversarial, APendingArrayReducedTwiceAndUsedElementwise) {
  const mv::Shape shape{6, 20};
  const auto xv = random_values(size_of(shape), 1001);
  const auto bv = random_values(20, 1002);
  const mv::Array x = dev(xv, shape), b = dev(bv, {20});
  for (const bool costly : {false, true}) {
    const auto make = [&] { return costly ? mv::exp(x * 0.25f) - b : x * 0.25f - b; };
    // Reference: materialized first.
    const mv::Array ref = make();
    mv::detail::materialized(ref);
    const mv::Array ws = mv::sum(ref, {1}), wm = mv::max(ref, {1}), w0 = mv::sum(ref, {0}), we = ref * 2.f + 1.f;
    const mv::Array wmean = mv::mean(ref, {1}, true), wsub = ref - wmean;
    // Fused: the same pending array reduced twice, reduced over a non-trailing axis, used after.
    const mv::Array p = make();
    const mv::Array s = mv::sum(p, {1});
    const mv::Array m = mv::max(p, {1});
    const mv::Array s0 = mv::sum(p, {0});
    const mv::Array e = p * 2.f + 1.f;
    const mv::Array mean = mv::mean(p, {1}, true);
    const mv::Array sub = p - mean;
    const std::string what = costly ? "costly" : "cheap";
    expect_same_bits<float>(s, ws, what + " sum");
    expect_same_bits<float>(m, wm, what + " max");
    expect_same_bits<float>(s0, w0, what + " sum over axis 0");
    expect_same_bits<float>(e, we, what + " elementwise after");
    expect_same_bits<float>(sub, wsub, what + " centered");
    expect_same_bits<float>(p, ref, what + " the array itself");
    // A reduction of a program that reads the already-reduced result.
    expect_same_bits<float>(mv::sum(p * mean, {1}), mv::sum([&] {
                              const mv::Array q = ref * wmean;
                              mv::detail::materialized(q);
                              return q;
                            }(), {1}), what + " sum(p * mean(p))");
  }
}

TEST(FusionAdversarial, ProgramsWithMoreThanSixteenInputs) {
  const mv::Shape shape{3, 21};
  std::vector<mv::Array> ins;
  std::vector<Host> hins;
  for (uint32_t i = 0; i < 20; ++i) {
    const mv::Shape s = i % 3 == 0 ? mv::Shape{21} : i % 3 == 1 ? mv::Shape{3, 1} : shape;
    const auto v = random_values(size_of(s), 1100 + i, -2, 2);
    ins.push_back(dev(v, s));
    hins.push_back(host_of(v, s));
  }
  const auto x = random_values(size_of(shape), 1200);
  hins.insert(hins.begin(), host_of(x, shape));
  const mv::Array xa = dev(x, shape);
  const Program prog = [&] {
    mv::Array acc = xa;
    for (size_t i = 0; i < ins.size(); ++i) acc = i % 2 ? acc + ins[i] : acc - ins[i] * 0.5f;
    return acc;
  };
  const Host hp = host_eval(hins, [](const std::vector<double>& a) {
    double acc = a[0];
    for (size_t i = 1; i < a.size(); ++i) acc = (i - 1) % 2 ? acc + a[i] : acc - a[i] * 0.5;
    return acc;
  });
  for (const Op op : kAllOps) check_reduction(prog, hp, op, {1}, false, "20 inputs", 1e-5);
}

TEST(FusionAdversarial, EmptyArraysGiveNumpysResultOrAnError) {
  const mv::Array e = mv::zeros({0, 5});
  const mv::Array f = mv::zeros({4, 0});
  // Sums over empty axes are zeros; over a kept empty axis an empty result.
  EXPECT_EQ(mv::sum(e * 2.f + 1.f, {1}).shape(), mv::Shape{0});
  const auto z = mv::sum(f * 2.f + 1.f, {1}).to_host<float>();
  ASSERT_EQ(z.size(), 4u);
  for (float v : z) EXPECT_EQ(v, 0.f);
  EXPECT_EQ(mv::sum(mv::exp(e), {}).to_host<float>()[0], 0.f);
  const auto mn = mv::mean(f + 1.f, {1}).to_host<float>();
  for (float v : mn) EXPECT_TRUE(std::isnan(v));
  expect_error([&] { (void)mv::max(f * 2.f, {1}).to_host<float>(); }, "zero-size");
  expect_error([&] { (void)mv::min(mv::exp(f), {}).to_host<float>(); }, "zero-size");
  expect_runtime_usable();
  EXPECT_EQ(mv::max(e * 2.f, {1}).shape(), mv::Shape{0});  // max over a non-empty axis of an empty array
  const auto ji = mv::jit([](const mv::Array& a) { return mv::sum(a * 3.f, {1}); });
  EXPECT_EQ(ji(mv::zeros({4, 0})).to_host<float>(), std::vector<float>(4, 0.f));
  expect_runtime_usable();
}

// ---------------------------------------------------------------------------------------------
// 4. Under jit, grad, vjp, scan and vmap.

TEST(FusionAdversarial, JitReplaysWithNewValuesEqualEagerUnfused) {
  const mv::Mesh mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const mv::Shape shape{8, 4100};
  const auto f = [](const mv::Array& a, const mv::Array& b) {
    const mv::Array e = mv::exp(a - mv::max(a, {1}, true));  // stored by its sum, read by the division
    return std::vector<mv::Array>{mv::sum(a * b + 1.f, {1}), mv::max(a - b, {1}), mv::min(a * 2.f, {0}),
                                  mv::mean(a + b, {0, 1}), e / mv::sum(e, {1}, true), mv::sum(e, {1})};
  };
  const auto unfused = [](const mv::Array& a, const mv::Array& b) {
    auto m = [](mv::Array p) {
      mv::detail::materialized(p);
      return p;
    };
    const mv::Array e = m(mv::exp(a - mv::max(a, {1}, true)));
    const mv::Array se = mv::sum(e, {1}, true);
    return std::vector<mv::Array>{mv::sum(m(a * b + 1.f), {1}), mv::max(m(a - b), {1}), mv::min(m(a * 2.f), {0}),
                                  mv::mean(m(a + b), {0, 1}), m(e / se), mv::sum(e, {1})};
  };
  const auto jitted = mv::jit(f);
  for (const bool sharded : {false, true})
    for (uint32_t call = 0; call < 3; ++call) {
      const auto av = random_values(size_of(shape), 1300 + call, -3, 3);
      const auto bv = random_values(4100, 1400 + call);
      mv::Array a = dev(av, shape), b = dev(bv, {4100});
      if (sharded) {
        a = mv::device_put(a, mv::NamedSharding(mesh, P("x")));
        b = mv::device_put(b, mv::NamedSharding(mesh, P()));
      }
      const auto got = jitted(a, b);
      const auto want = unfused(a, b);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        expect_same_bits<float>(got[i], want[i],
                                std::string(sharded ? "sharded" : "one device") + " call " + std::to_string(call) +
                                    " result " + std::to_string(i));
      // Host: the first result.
      const auto s = got[0].to_host<float>();
      for (int64_t r = 0; r < 8; ++r) {
        double w = 0, mag = 0;
        for (int64_t i = 0; i < 4100; ++i) {
          const double t = static_cast<double>(av[static_cast<size_t>(r * 4100 + i)]) * bv[static_cast<size_t>(i)] + 1;
          w += t;
          mag += std::abs(t);
        }
        EXPECT_NEAR(s[static_cast<size_t>(r)], w, 1e-6 * mag) << "call " << call << " row " << r;
      }
    }
}

TEST(FusionAdversarial, GradAndVjpThroughFusedReductions) {
  const mv::Shape shape{6, 13};
  const auto xv = random_values(size_of(shape), 1500, -2, 1);
  const auto wv = random_values(13, 1501, -2, 1);
  const mv::Array x = dev(xv, shape), w = dev(wv, {13});
  // loss = sum(logsumexp(x * w)) + mean(max(x - w, 1)) + sum((x * w)^2) / 2
  const auto loss = [](const mv::Array& a, const mv::Array& b) {
    const mv::Array y = a * b;
    return mv::sum(mv::nn::logsumexp(y, {1})) + mv::mean(mv::max(a - b, {1})) + mv::sum(y * y) * 0.5f;
  };
  const auto g = mv::grad(loss, std::vector<int>{0, 1})(x, w);
  const auto jg = mv::jit([&](const mv::Array& a, const mv::Array& b) {
    const auto gg = mv::grad(loss, std::vector<int>{0, 1})(a, b);
    return std::vector<mv::Array>{gg[0], gg[1]};
  });
  const auto jgot = jg(x, w);
  expect_same_bits<float>(jgot[0], g[0], "jit(grad) dx");
  expect_same_bits<float>(jgot[1], g[1], "jit(grad) dw");
  // Host gradient.
  std::vector<double> dx(xv.size(), 0), dw(13, 0);
  for (int r = 0; r < 6; ++r) {
    double mx = -1e300, z = 0;
    int arg = 0;
    double best = -1e300;
    for (int c = 0; c < 13; ++c) {
      const double y = static_cast<double>(xv[static_cast<size_t>(r * 13 + c)]) * wv[static_cast<size_t>(c)];
      mx = std::max(mx, y);
      const double d = static_cast<double>(xv[static_cast<size_t>(r * 13 + c)]) - wv[static_cast<size_t>(c)];
      if (d > best) best = d, arg = c;
    }
    for (int c = 0; c < 13; ++c) z += std::exp(static_cast<double>(xv[static_cast<size_t>(r * 13 + c)]) * wv[static_cast<size_t>(c)] - mx);
    for (int c = 0; c < 13; ++c) {
      const size_t k = static_cast<size_t>(r * 13 + c);
      const double y = static_cast<double>(xv[k]) * wv[static_cast<size_t>(c)];
      const double dy = std::exp(y - mx) / z + y;
      dx[k] += dy * wv[static_cast<size_t>(c)] + (c == arg ? 1.0 / 6 : 0);
      dw[static_cast<size_t>(c)] += dy * xv[k] - (c == arg ? 1.0 / 6 : 0);
    }
  }
  const auto gx = g[0].to_host<float>(), gw = g[1].to_host<float>();
  for (size_t k = 0; k < dx.size(); ++k) EXPECT_NEAR(gx[k], dx[k], 1e-4 * (1 + std::abs(dx[k]))) << "dx " << k;
  for (size_t k = 0; k < dw.size(); ++k) EXPECT_NEAR(gw[k], dw[k], 1e-4 * (1 + std::abs(dw[k]))) << "dw " << k;
  // vjp of a row-sum of a program, against its transpose: ct broadcast times d(program).
  const auto [out, vjp_fn] = mv::vjp([](const mv::Array& a) { return mv::sum(a * a + 1.f, {1}); }, x);
  const auto cv = random_values(6, 1502);
  const mv::Array ct = dev(cv, {6});
  const auto [dxa] = vjp_fn(ct);
  const auto got = dxa.to_host<float>();
  for (size_t k = 0; k < got.size(); ++k) {
    const double want = 2.0 * xv[k] * cv[k / 13];
    EXPECT_NEAR(got[k], want, 1e-6 * (1 + std::abs(want))) << "vjp " << k;
  }
  const mv::Array sq = x * x + 1.f;
  mv::detail::materialized(sq);
  expect_same_bits<float>(out, mv::sum(sq, {1}), "vjp primal");
}

TEST(FusionAdversarial, ScanAndVmapBodiesWithFusedReductions) {
  const mv::Shape shape{5, 4, 9};
  const auto xv = random_values(size_of(shape), 1600, -3, 3);
  const mv::Array xs = dev(xv, shape);
  const mv::Array bias = dev(random_values(9, 1601), {9});
  // scan: carry += sum(x_t * bias, 1); y_t = max(exp(x_t) - carry, 1).
  const auto body = [&](const mv::Array& carry, const mv::Array& x) {
    const mv::Array c = carry + mv::sum(x * bias, {1});
    return std::make_pair(c, mv::max(mv::exp(x * 0.5f) - mv::reshape(c, {4, 1}), {1}));
  };
  const auto body_unfused = [&](const mv::Array& carry, const mv::Array& x) {
    const mv::Array p = x * bias;
    mv::detail::materialized(p);
    const mv::Array c = carry + mv::sum(p, {1});
    const mv::Array q = mv::exp(x * 0.5f) - mv::reshape(c, {4, 1});
    mv::detail::materialized(q);
    return std::make_pair(c, mv::max(q, {1}));
  };
  const auto [carry, ys] = mv::lax::scan(body, mv::zeros({4}), xs);
  const auto [carry_u, ys_u] = mv::lax::scan(body_unfused, mv::zeros({4}), xs);
  expect_same_bits<float>(carry, carry_u, "scan carry");
  expect_same_bits<float>(ys, ys_u, "scan ys");
  // Host reference for the carry.
  const auto bh = bias.to_host<float>();
  const auto ch = carry.to_host<float>();
  for (int r = 0; r < 4; ++r) {
    double c = 0, mag = 0;
    for (int t = 0; t < 5; ++t)
      for (int i = 0; i < 9; ++i) {
        const double v = static_cast<double>(xv[static_cast<size_t>((t * 4 + r) * 9 + i)]) * bh[static_cast<size_t>(i)];
        c += v;
        mag += std::abs(v);
      }
    EXPECT_NEAR(ch[static_cast<size_t>(r)], c, 1e-5 * mag) << "scan carry " << r;
  }
  // vmap: a full reduction per slice equals the row reduction of the whole (same order).
  const auto per = mv::vmap([&](const mv::Array& x) { return mv::sum(x * 2.f - 1.f); })(xs);
  const mv::Array whole = [&] {
    const mv::Array p = xs * 2.f - 1.f;
    mv::detail::materialized(p);
    return mv::sum(p, {1, 2});
  }();
  expect_same_bits<float>(per, whole, "vmap sum vs row sum");
  // A jitted scan, replayed with new values.
  const auto jscan = mv::jit([&](const mv::Array& x) { return mv::lax::scan(body, mv::zeros({4}), x).second; });
  for (uint32_t call = 0; call < 2; ++call) {
    const mv::Array xc = dev(random_values(size_of(shape), 1700 + call, -3, 3), shape);
    expect_same_bits<float>(jscan(xc), mv::lax::scan(body_unfused, mv::zeros({4}), xc).second,
                            "jit(scan) call " + std::to_string(call));
  }
}

