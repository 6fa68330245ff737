// The tutorials' printed results (seeds 000-003, tests/data/golden/EXAMPLES.md in the project's
// notes), each asserted against the exact text the tutorial prints. The values that hang on the
// digits of sin, tanh and exp are in test_tutorial_digits.cpp; the layout pictures of 001 are
// also checked row by row of the golden MANIFEST in test_visualize.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "scenario.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Lines with trailing spaces trimmed and ANSI colour codes removed, as the goldens compare.
std::vector<std::string> picture_lines(const std::string& text) {
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b') {
      while (i < text.size() && text[i] != 'm') ++i;
      continue;
    }
    plain += text[i];
  }
  std::vector<std::string> lines;
  std::stringstream s(plain);
  for (std::string line; std::getline(s, line);) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// The picture JAX prints (colour mode, codes removed), as in tests/data/golden/visualize.
std::vector<std::string> picture(const Array& a) {
  return picture_lines(mv::visualize_array_sharding(a, {.use_color = true}));
}

bool cpu() {
  return test_runtime().platform() == "CPU";
}

// The tutorials ran on JAX's CPU devices; on a GPU adapter the same pictures and messages say
// GPU (as JAX's do on GPUs), the same width, so every line breaks where the tutorial's does.
std::string on_this_platform(std::string text) {
  const std::string platform = test_runtime().platform();
  for (size_t at = text.find("CPU"); at != std::string::npos; at = text.find("CPU", at + 3))
    text.replace(at, 3, platform);
  return text;
}

std::vector<std::string> golden_picture(const std::string& file) {
  const std::string text = read_text(golden_dir() + "/visualize/" + file);
  EXPECT_FALSE(text.empty()) << file;
  return picture_lines(on_this_platform(text));
}

std::string devices_of(const Array& a) {
  std::string s;
  for (const int d : a.devices()) s += std::to_string(d) + " ";
  return s;
}

// Runs a sample's scenario on the tests' runtime and returns what it printed.
std::string run_scenario(const std::string& name, std::vector<std::string> args) {
  const auto* scenario = mv::scenarios::find(name);
  EXPECT_NE(scenario, nullptr) << name;
  if (!scenario) return "";
  std::ostringstream out, err;
  mv::scenarios::ScenarioContext ctx;
  ctx.args = std::move(args);
  ctx.out = &out;
  ctx.err = &err;
  EXPECT_EQ(scenario->run(ctx), 0) << name << "\n" << out.str() << err.str();
  return out.str();
}

}  // namespace

// ---- 000: JAX, Introduction to parallel programming -------------------------------------------

TEST(Tutorial000, DevicesAndShardingsPrintAsJax) {
  if (!cpu()) GTEST_SKIP() << "the tutorial prints CPU devices";
  std::string list = "[";
  for (const auto& d : mv::devices()) list += (d.id ? ", " : "") + d.repr();
  EXPECT_EQ(list + "]",
            "[CpuDevice(id=0), CpuDevice(id=1), CpuDevice(id=2), CpuDevice(id=3), CpuDevice(id=4), "
            "CpuDevice(id=5), CpuDevice(id=6), CpuDevice(id=7)]");
  const auto arr = mv::arange(32.0f).reshape({4, 8});
  EXPECT_EQ(arr.sharding().to_string(),
            "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)");
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const mv::NamedSharding sharding(mesh, P("x", "y"));
  EXPECT_EQ(sharding.to_string(),
            "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), "
            "spec=PartitionSpec('x', 'y'), memory_kind=unpinned_host)");
  const auto arr_sharded = mv::device_put(arr, sharding);
  EXPECT_EQ(arr_sharded.to_string(),
            "[[ 0.  1.  2.  3.  4.  5.  6.  7.]\n [ 8.  9. 10. 11. 12. 13. 14. 15.]\n"
            " [16. 17. 18. 19. 20. 21. 22. 23.]\n [24. 25. 26. 27. 28. 29. 30. 31.]]");
  const std::string cells = mv::visualize_array_sharding(arr_sharded, {.use_color = false});
  for (int d = 0; d < 8; ++d)
    EXPECT_NE(cells.find("CPU " + std::to_string(d) + " "), std::string::npos) << cells;
}

TEST(Tutorial000, JitFollowsDataAndContracts) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto arr_sharded =
      mv::device_put(mv::arange(32.0f).reshape({4, 8}), mv::NamedSharding(mesh, P("x", "y")));
  const auto f_elementwise = mv::jit([](const Array& x) { return 2 * mv::sin(x) + 1; });
  EXPECT_TRUE(f_elementwise(arr_sharded).sharding() ==
              arr_sharded.sharding());  // shardings match: True
  const auto f_contract = mv::jit([](const Array& x) { return mv::sum(x, {0}); });
  const auto result = f_contract(arr_sharded);
  EXPECT_EQ(result.to_string(), "[48. 52. 56. 60. 64. 68. 72. 76.]");
  EXPECT_EQ(picture(result), golden_picture("contract_result_8.txt"));  // CPU 0,4 CPU 1,5 ...
}

TEST(Tutorial000, TypeOfAndXPlusX) {
  const auto some_array = mv::arange(8);
  EXPECT_EQ("JAX-level type of some_array: " + mv::type_of(some_array),
            "JAX-level type of some_array: int32[8]");
  std::string traced;
  const auto foo = mv::jit([&](const Array& x) {
    traced = "JAX-level type of x during tracing: " + mv::type_of(x);
    return x + x;
  });
  const auto doubled = foo(some_array);
  EXPECT_EQ(traced, "JAX-level type of x during tracing: int32[8]");
  EXPECT_EQ(doubled.to_string(),
            "[ 0  2  4  6  8 10 12 14]");  // Array([ 0, 2, ..., 14], dtype=int32)
  EXPECT_EQ(doubled.dtype(), mv::DType::int32);
}

TEST(Tutorial000, ShardingInTypes) {
  const auto mesh =
      mv::make_mesh({2, 4}, {"X", "Y"}, {mv::AxisType::Explicit, mv::AxisType::Explicit});
  const auto replicated_array = mv::arange(8).reshape({4, 2});
  const auto sharded_array =
      mv::device_put(replicated_array, mv::NamedSharding(mesh, P("X", mv::None)));
  EXPECT_EQ("replicated_array type: " + mv::type_of(replicated_array) +
                " sharded_array type: " + mv::type_of(sharded_array),
            "replicated_array type: int32[4,2] sharded_array type: int32[4@X,2]");
  const auto arg0 =
      mv::device_put(mv::arange(4).reshape({4, 1}), mv::NamedSharding(mesh, P("X", mv::None)));
  const auto arg1 =
      mv::device_put(mv::arange(8).reshape({1, 8}), mv::NamedSharding(mesh, P(mv::None, "Y")));
  std::string printed;
  const auto add_arrays = mv::jit([&](const Array& x, const Array& y) {
    const auto ans = x + y;
    printed = "x sharding: " + mv::type_of(x) + " y sharding: " + mv::type_of(y) +
              " ans sharding: " + mv::type_of(ans);
    return ans;
  });
  const mv::use_mesh guard(mesh);
  add_arrays(arg0, arg1);
  EXPECT_EQ(printed,
            "x sharding: int32[4@X,1] y sharding: int32[1,8@Y] ans sharding: int32[4@X,8@Y]");
}

TEST(Tutorial000, ShardMapLocalShapeAndSums) {
  const auto mesh = mv::make_mesh({8}, {"x"});
  const auto x = mv::arange(32);
  std::string local;
  const auto y = mv::shard_map(
      [&](const Array& v) {
        local = "device local shape: x.shape=" + mv::shape_to_string(v.shape());
        return v * 2;
      },
      mesh, {P("x")}, P("x"))(x);
  EXPECT_EQ("global shape: x.shape=" + mv::shape_to_string(x.shape()),
            "global shape: x.shape=(32,)");
  EXPECT_EQ(local, "device local shape: x.shape=(4,)");
  EXPECT_EQ(y.to_host<int32_t>(), (x * 2).to_host<int32_t>());
  const auto per_shard =
      mv::shard_map([](const Array& v) { return mv::sum(v, {}, true); }, mesh, {P("x")}, P("x"))(x);
  EXPECT_EQ(per_shard.to_string(), "[  6  22  38  54  70  86 102 118]");
  const auto total = mv::shard_map([](const Array& v) { return mv::psum(mv::sum(v), "x"); }, mesh,
                                   {P("x")}, P())(x);
  EXPECT_EQ(total.to_string(), "496");
}

TEST(Tutorial000, LayerExplicitTypes) {
  const std::string dir = golden_dir() + "/layer/";
  const auto x = mv::load_npy(dir + "x.npy");
  const auto weights = mv::load_npy(dir + "weights.npy");
  const auto bias = mv::load_npy(dir + "bias.npy");
  const auto explicit_mesh = mv::make_mesh({8}, {"X"}, {mv::AxisType::Explicit});
  std::string printed;
  const auto layer_auto = mv::jit([&](const Array& x, const Array& w, const Array& b) {
    const auto out = mv::sigmoid(mv::matmul(x, w) + b);
    printed = "x sharding: " + mv::type_of(x) + " weights sharding: " + mv::type_of(w) +
              " bias sharding: " + mv::type_of(b) + " out sharding: " + mv::type_of(out);
    return out;
  });
  const mv::use_mesh guard(explicit_mesh);
  layer_auto(mv::device_put(x, mv::NamedSharding(explicit_mesh, P("X"))),
             mv::device_put(weights, mv::NamedSharding(explicit_mesh, P())), bias);
  EXPECT_EQ(printed,
            "x sharding: float32[32@X] weights sharding: float32[32,4] bias sharding: float32[4] "
            "out sharding: float32[4]");
}

// ---- 001: torchax, Distributed arrays and automatic parallelization --------------------------

TEST(Tutorial001, ComputationFollowsData) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::normal(mv::random_key(0), {256, 256});
  const auto y = mv::device_put(x, mv::NamedSharding(mesh, P("a", "b")));
  EXPECT_TRUE(mv::jit([](const Array& v) { return mv::sin(v); })(y).sharding() == y.sharding());
  const auto lhs = mv::device_put(x, mv::NamedSharding(mesh, P("a", mv::None)));
  const auto rhs = mv::device_put(x, mv::NamedSharding(mesh, P(mv::None, "b")));
  const auto mm = mv::jit([](const Array& a, const Array& b) { return mv::matmul(a, b); });
  const auto w = mm(lhs, rhs);
  EXPECT_TRUE(w.sharding() == mv::Sharding(mv::NamedSharding(mesh, P("a", "b"))));
  EXPECT_TRUE(mm.lower(lhs, rhs).collective_counts().empty()) << mm.lower(lhs, rhs).as_text();
  // torch.allclose(torch.matmul(x_single, x_single), torch.matmul(y, z)): True
  EXPECT_LE(mv::scenarios::max_abs_diff(w, mv::matmul(x, x)), 1e-3f);
  // Even copying a sharded Array produces a result with the sharding of the input: the
  // tutorial's w_copy = jnp.copy(w), w the matmul's result, pictured as w.
  const auto w_copy = mv::copy(w);
  EXPECT_TRUE(w_copy.sharding() == w.sharding());
  EXPECT_EQ(picture(w_copy), picture(w));
}

TEST(Tutorial001, CopyAt8192IsTheTutorialsPicture) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto w = mv::zeros({8192, 8192}, mv::DType::float32, mv::NamedSharding(mesh, P("a", "b")));
  const auto w_copy = mv::copy(w);
  EXPECT_TRUE(w_copy.sharding() == w.sharding());
  EXPECT_EQ(picture(w_copy), golden_picture("ab_8192x8192.txt"));
}

TEST(Tutorial001, IncompatibleDevicesAsJaxSaysIt) {
  const auto add = mv::jit([](const Array& a, const Array& b) { return a + b; });
  const auto put = [](std::vector<int> devices) {
    const auto mesh = mv::make_mesh({static_cast<int>(devices.size())}, {"x"}, {}, devices);
    return mv::zeros({8192, 8192}, mv::DType::float32, mv::NamedSharding(mesh, P("x")));
  };
  const std::string first = message_of([&] { add(put({0, 1, 2, 3}), put({4, 5, 6, 7})); });
  EXPECT_EQ(
      first.substr(0, first.find("; ")),
      on_this_platform(
          "Received incompatible devices for jitted computation. Got argument x of add with shape "
          "float32[8192,8192] and device ids [0, 1, 2, 3] on platform CPU and argument y of add "
          "with shape float32[8192,8192] and device ids [4, 5, 6, 7] on platform CPU"));
  // print_exception(e): textwrap.fill of the coloured "ValueError: ..." at 70 columns.
  EXPECT_EQ(
      mv::scenarios::exception_text("ValueError", first.substr(0, first.find("; ")), false),
      on_this_platform("ValueError: Received incompatible devices for jitted\n"
                       "computation. Got argument x of add with shape float32[8192,8192] and\n"
                       "device ids [0, 1, 2, 3] on platform CPU and argument y of add with\n"
                       "shape float32[8192,8192] and device ids [4, 5, 6, 7] on platform CPU"));
  const std::string permuted = message_of([&] {
    add(put({0, 1, 2, 3, 4, 5, 6, 7}), put({0, 1, 2, 3, 6, 7, 4, 5}));
  });
  EXPECT_EQ(
      mv::scenarios::exception_text("ValueError", permuted.substr(0, permuted.find("; ")), false),
      on_this_platform("ValueError: Received incompatible devices for jitted\n"
                       "computation. Got argument x of add with shape float32[8192,8192] and\n"
                       "device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU and argument y of\n"
                       "add with shape float32[8192,8192] and device ids [0, 1, 2, 3, 6, 7, 4,\n"
                       "5] on platform CPU"));
  // With colour the name is red, and the line breaks stay where the tutorial has them.
  const std::string red = mv::scenarios::exception_text("ValueError", "a b", true);
  EXPECT_EQ(red, "\x1b[31mValueError\x1b[0m: a b");
}

TEST(Tutorial001, UncommittedArraysMoveFreely) {
  const auto x = mv::normal(mv::random_key(2), {64, 64});
  const auto y =
      mv::device_put(x, mv::NamedSharding(mv::make_mesh({4}, {"x"}, {}, {0, 1, 2, 3}), P("x")));
  EXPECT_NO_THROW((void)(y + mv::ones_like(y)).to_host<float>());
  EXPECT_NO_THROW((void)(y + mv::arange(0, static_cast<int32_t>(y.size())).reshape(y.shape()))
                      .to_host<float>());
}

TEST(Tutorial001, WithShardingConstraintPictures) {
  const auto mesh = mv::make_mesh({4, 2}, {"x", "y"});
  const auto x = mv::zeros({8192, 8192});  // torch.randn((8192, 8192)): one device
  EXPECT_EQ(picture(x), golden_picture("single_device_8192x8192.txt"));
  const auto f = mv::jit([&](const Array& v) {
    return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P("y", "x")));
  });
  EXPECT_EQ(picture(f(x)), golden_picture("yx_8192x8192.txt"));
  const auto g = mv::jit([&](const Array& v) {
    return mv::with_sharding_constraint(v + 1, mv::NamedSharding(mesh, P()));
  });
  const auto replicated = g(x);
  EXPECT_TRUE(replicated.sharding().is_fully_replicated());
  EXPECT_EQ(devices_of(replicated), "0 1 2 3 4 5 6 7 ");
}

TEST(Tutorial001, TensorParallelPictures) {
  const auto mesh = mv::make_mesh({4, 2}, {"batch", "model"});
  const auto batch0 =
      mv::zeros({8192, 784}, mv::DType::float32, mv::NamedSharding(mesh, P("batch", mv::None)));
  const auto batch1 =
      mv::zeros({8192, 10}, mv::DType::float32, mv::NamedSharding(mesh, P("batch", mv::None)));
  EXPECT_EQ(picture(batch0), golden_picture("batch_8192x784.txt"));
  EXPECT_EQ(picture(batch1), golden_picture("batch_8192x10.txt"));
  const auto w1 = mv::zeros({1024, 1024}, mv::DType::float32, mv::NamedSharding(mesh, P("model")));
  const auto w2 =
      mv::zeros({1024, 1024}, mv::DType::float32, mv::NamedSharding(mesh, P(mv::None, "model")));
  EXPECT_EQ(picture(w1), golden_picture("model_1024x1024.txt"));
  EXPECT_EQ(picture(w2), golden_picture("none_model_1024x1024.txt"));
}

// 8-way data parallel and 4x2 data + tensor parallel training, small: params.keys() in the
// tutorial's order, loss_jit before and after, gradients equal to the single-device ones.
TEST(Tutorial001, TrainingSample) {
  const std::string out = run_scenario(
      "mlp_training", {"--batch", "64", "--steps", "2", "--layers", "16,32,32,32,8", "--no-color"});
  EXPECT_NE(out.find("odict_keys(['layers.0.weight', 'layers.0.bias', 'layers.1.weight', "
                     "'layers.1.bias', 'layers.2.weight', 'layers.2.bias', 'layers.3.weight', "
                     "'layers.3.bias'])"),
            std::string::npos)
      << out;
  size_t loss_jit = 0;
  for (size_t at = 0;
       (at = out.find(">>> print(loss_jit(params, batch))\n", at)) != std::string::npos; ++at)
    ++loss_jit;
  EXPECT_EQ(loss_jit, 6u) << out;  // before and after the steps, in each of the 3 modes
  size_t equal = 0;
  for (size_t at = 0;
       (at = out.find("gradients vs the single-device gradients (1e-4 of the largest): equal",
                      at)) != std::string::npos;
       ++at)
    ++equal;
  EXPECT_EQ(equal, 2u) << out;  // data parallel and tensor parallel
  EXPECT_NE(out.find(">>> visualize_array_sharding(batch[0])"), std::string::npos) << out;
  EXPECT_NE(out.find("the tutorial: 263 ms \u00b1 7.32 ms per loop"), std::string::npos) << out;
}

// ---- 002: How To Scale Your Model, part 10 --------------------------------------------------

TEST(Tutorial002, MatmulSquareProgramTextOnFourDevices) {
  const auto mesh = mv::make_mesh({2, 2}, {"X", "Y"}, {}, {0, 1, 2, 3});
  const auto in = mv::device_put(mv::ones({8, 2048}), mv::NamedSharding(mesh, P("X", "Y")));
  const auto w = mv::device_put(mv::ones({2048, 8192}), mv::NamedSharding(mesh, P("Y", mv::None)));
  const auto matmul_square = mv::jit(
      [](const Array& in, const Array& w) { return mv::einsum("bd,df->bf", mv::square(in), w); },
      {.out_shardings = {mv::NamedSharding(mesh, P("X", mv::None))}, .name = "matmul_square"});
  const std::string text = matmul_square.lower(in, w).as_text();
  EXPECT_EQ(text.substr(0, text.find('\n')), "jit(matmul_square) on 4 devices") << text;
  EXPECT_NE(text.find("\n  fusion square(in0): local float32(4, 1024) on each of 4 devices\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  dot_general: local float32(4, 1024) x (1024, 8192) -> (4, 8192) on each "
                      "of 4 devices\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "\n  all-reduce(sum) over ('Y',): replica_groups={{0,1},{2,3}}, 128 KiB per device"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  out0: float32[8,8192] PartitionSpec('X', None)\n"), std::string::npos)
      << text;
}

TEST(Tutorial002, ConstraintBetweenMatmulsCostsCollectives) {
  const auto mesh = mv::make_mesh({2, 2}, {"x", "y"}, {}, {0, 1, 2, 3});
  const mv::NamedSharding xy(mesh, P("x", "y"));
  const auto x = mv::device_put(mv::normal(mv::random_key(5), {8, 256}), xy);
  const auto Win = mv::device_put(mv::normal(mv::random_key(6), {256, 512}),
                                  mv::NamedSharding(mesh, P("y", mv::None)));
  const auto Wout = mv::device_put(mv::normal(mv::random_key(7), {256, 512}),
                                   mv::NamedSharding(mesh, P("y", mv::None)));
  std::optional<mv::Sharding> hidden_sharding;
  const auto matmul = mv::jit([&](const Array& x, const Array& Win, const Array& Wout) {
    auto hidden = mv::einsum("bd,df->bf", x, Win);
    hidden = mv::with_sharding_constraint(hidden, xy);
    hidden_sharding = hidden.sharding();
    return mv::einsum("bf,df->bd", hidden, Wout);
  });
  const auto lowered = matmul.lower(x, Win, Wout);
  ASSERT_TRUE(hidden_sharding.has_value());
  EXPECT_TRUE(*hidden_sharding == mv::Sharding(xy));  // the constraint is honoured
  EXPECT_NE(lowered.as_text().find("with_sharding_constraint:"), std::string::npos)
      << lowered.as_text();
  EXPECT_FALSE(lowered.collective_counts().empty()) << lowered.as_text();
  const auto single = [](const Array& a) {
    return mv::array(std::span<const float>(a.to_host<float>()), a.shape());
  };
  const auto reference =
      mv::einsum("bf,df->bd", mv::einsum("bd,df->bf", single(x), single(Win)), single(Wout));
  const float largest = mv::max(mv::abs(reference)).to_host<float>()[0];
  EXPECT_LE(mv::scenarios::max_abs_diff(matmul(x, Win, Wout), reference), 1e-5f * largest);
}

TEST(Tutorial002, SliceAndAverage) {
  const auto mesh = mv::make_mesh({2, 4}, {"x", "y"});
  const auto x = mv::device_put(mv::arange(0, 512), mv::NamedSharding(mesh, P({"x", "y"})));
  const auto out = mv::shard_map(
      [](const Array& local) {
        return mv::pmean(mv::slice(local, {0}, {4}), {"x", "y"});
      },
      mesh, {P({"x", "y"})}, P(mv::None))(x);
  EXPECT_EQ(mv::shape_to_string(out.shape()), "(4,)");
  EXPECT_EQ(out.to_string(), "[224. 225. 226. 227.]");
}

// ---- Program text ------------------------------------------------------------------------------

TEST(ProgramText, TanhReadsTheMatmulResult) {
  const auto mesh = mv::make_mesh({4, 2}, {"a", "b"});
  const auto x = mv::normal(mv::random_key(0), {64, 128}, mv::NamedSharding(mesh, P("a", "b")));
  const auto w =
      mv::normal(mv::random_key(1), {128, 64}, mv::NamedSharding(mesh, P("b", mv::None)));
  const auto f = mv::jit([](const Array& x, const Array& w) { return mv::tanh(mv::matmul(x, w)); },
                         {.name = "layer"});
  const std::string text = f.program_text(x, w);
  EXPECT_EQ(text.substr(0, text.find('\n')), "jit(layer) on 8 devices") << text;
  EXPECT_NE(text.find("fusion tanh(dot_general): local float32(16, 64)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("tanh(in0)"), std::string::npos) << text;
}

TEST(ProgramText, CountsTheProgramsDevices) {
  const auto one = mv::jit([](const Array& a) { return a * 2 + 1; });
  const std::string text = one.program_text(mv::arange(8.0f));
  EXPECT_EQ(text.substr(0, text.find('\n')), "jit(f) on 1 device") << text;
  const auto mesh = mv::make_mesh({2}, {"x"}, {}, {6, 7});
  const auto xs = mv::device_put(mv::arange(8.0f), mv::NamedSharding(mesh, P("x")));
  const std::string two = one.program_text(xs);
  EXPECT_EQ(two.substr(0, two.find('\n')), "jit(f) on 2 devices") << two;
  EXPECT_NE(two.find("fusion add(mul(in0, 2), 1)"), std::string::npos) << two;
}

// ---- 003: learn_jax, intro to distributed -------------------------------------------------------

TEST(Tutorial003, TanhFollowsData) {
  const auto mesh = mv::make_mesh({8}, {"i"});
  const auto a_sharded = mv::device_put(mv::arange(8), mv::NamedSharding(mesh, P("i")));
  EXPECT_TRUE(mv::tanh(a_sharded).sharding() == a_sharded.sharding());
  EXPECT_EQ(mesh.to_string(), "Mesh('i': 8, axis_types=(Auto,))");
}

TEST(Tutorial003, MeshReprInFull) {
  EXPECT_EQ(mv::make_mesh({4, 2}, {"i", "j"}).repr(),
            "Mesh(device_ids=array([[0, 1],\n       [2, 3],\n       [4, 5],\n       [6, 7]]), "
            "axis_names=('i', 'j'), axis_types=(Auto, Auto))");
  EXPECT_EQ(
      mv::make_mesh({8}, {"i"}).repr(),
      "Mesh(device_ids=array([0, 1, 2, 3, 4, 5, 6, 7]), axis_names=('i',), axis_types=(Auto,))");
  EXPECT_EQ(
      mv::make_mesh({2, 2, 2}, {"a", "b", "c"}).repr(),
      "Mesh(device_ids=array([[[0, 1],\n        [2, 3]],\n\n       [[4, 5],\n        [6, 7]]]), "
      "axis_names=('a', 'b', 'c'), axis_types=(Auto, Auto, Auto))");
}

TEST(Tutorial003, ShardMapCollectives) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto x = mv::normal(mv::random_key(0), {192, 64});
  const auto w = mv::normal(mv::random_key(1), {64, 128});
  const auto b = mv::normal(mv::random_key(2), {128});
  std::string shapes;
  const auto y = mv::shard_map(
      [&](const Array& x, const Array& w, const Array& b) {
        shapes = "Local x shape " + mv::shape_to_string(x.shape()) + " Local w shape " +
                 mv::shape_to_string(w.shape()) + " Local b shape " +
                 mv::shape_to_string(b.shape());
        return mv::dot(x, w) + b;
      },
      mesh, {P("i", mv::None), P(mv::None, "j"), P("j")}, P("i", "j"))(x, w, b);
  EXPECT_EQ(shapes, "Local x shape (48, 64) Local w shape (64, 64) Local b shape (64,)");
  EXPECT_EQ("Output shape " + mv::shape_to_string(y.shape()), "Output shape (192, 128)");
  EXPECT_LE(mv::scenarios::max_abs_diff(y, mv::dot(x, w) + b), 1e-5f);

  std::string gathered;
  const auto out = mv::shard_map(
      [&](const Array& x, const Array& w) {
        const auto w_gathered = mv::all_gather(w, "i", 0, true);
        gathered = "Original w shape " + mv::shape_to_string(w.shape()) + " Gathered w shape " +
                   mv::shape_to_string(w_gathered.shape());
        return mv::dot(x, w_gathered);
      },
      mesh, {P("i", mv::None), P("i", mv::None)}, P("i", mv::None))(x, w);
  EXPECT_EQ(gathered, "Original w shape (16, 128) Gathered w shape (64, 128)");
  EXPECT_LE(mv::scenarios::max_abs_diff(out, mv::dot(x, w)), 1e-5f);

  const auto normalized = mv::shard_map(
      [](const Array& v) {
        const auto mean = mv::pmean(v, "j");
        return (v - mean) / mv::power(mv::pmean(mv::power(v - mean, 2), "j"), 0.5);
      },
      mesh, {P("i", "j")}, P("i", "j"))(x);
  EXPECT_EQ(mv::shape_to_string(normalized.shape()), "(192, 64)");
  EXPECT_NEAR(mv::mean(normalized).to_host<float>()[0], 0.0f, 1e-5f);
  EXPECT_NEAR(mv::sqrt(mv::mean(mv::square(normalized))).to_host<float>()[0], 1.0f, 1e-5f);

  const auto x_exmp = mv::array({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2}, mv::Shape{4, 4});
  const auto scattered = mv::shard_map([](const Array& v) { return mv::psum_scatter(v, "i", 1); },
                                       mesh, {P("i", mv::None)}, P("i"))(x_exmp);
  EXPECT_EQ("Output " + scattered.to_string(), "Output [22 20 12 17]");

  const auto idx = mv::shard_map(
                       [] {
                         return mv::concatenate({mv::reshape(mv::axis_index("i"), {1, 1}),
                                                 mv::reshape(mv::axis_index("j"), {1, 1})},
                                                1);
                       },
                       mesh, {}, P({"i", "j"}))()
                       .to_host<int32_t>();
  std::string lines;
  for (int d = 0; d < 8; ++d)
    lines += "Device " + std::to_string(d) + ": i-axis=" + std::to_string(idx[2 * d]) +
             ", j-axis=" + std::to_string(idx[2 * d + 1]) + "\n";
  EXPECT_EQ(
      lines,
      "Device 0: i-axis=0, j-axis=0\nDevice 1: i-axis=0, j-axis=1\nDevice 2: i-axis=1, j-axis=0\n"
      "Device 3: i-axis=1, j-axis=1\nDevice 4: i-axis=2, j-axis=0\nDevice 5: i-axis=2, j-axis=1\n"
      "Device 6: i-axis=3, j-axis=0\nDevice 7: i-axis=3, j-axis=1\n");
}

TEST(Tutorial003, PpermuteRingPrintsBeforeAndAfter) {
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  std::vector<std::pair<int, int>> perm;
  for (int i = 0; i < 4; ++i) perm.emplace_back(i, (i + 1) % 4);
  const auto out = mv::shard_map([&](const Array& x) { return mv::ppermute(x, "i", perm); }, mesh,
                                 {P("i")}, P("i"))(mv::arange(4));
  EXPECT_EQ("Output " + out.to_string(), "Output [3 0 1 2]");
  if (!cpu()) GTEST_SKIP() << "the sample's text names CPU devices";
  const std::string text = run_scenario("learn_jax_distributed", {"--no-color"});
  std::string before = "BEFORE:\n ", after = "AFTER:\n ";
  const int before_values[] = {0, 0, 1, 1, 2, 2, 3, 3}, after_values[] = {3, 3, 0, 0, 1, 1, 2, 2};
  for (int d = 0; d < 8; ++d) {
    const std::string head = std::string(d ? "\n" : "") + "On TFRT_CPU_" + std::to_string(d) +
                             " at mesh coordinates (i, j,) = (" + std::to_string(d / 2) + ", " +
                             std::to_string(d % 2) + "):\n";
    before += head + "[" + std::to_string(before_values[d]) + "]\n";
    after += head + "[" + std::to_string(after_values[d]) + "]\n";
  }
  EXPECT_NE(text.find(before + "\n" + after + "\nOutput [3 0 1 2]\n"), std::string::npos) << text;
  EXPECT_NE(text.find(">>> mesh  # noqa: B018\nMesh(device_ids=array([[0, 1],"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nDevice TFRT_CPU_0\n"), std::string::npos) << text;
}

TEST(Tutorial003, RandomKeysAreUint32AndFoldPerAxis) {
  EXPECT_EQ(mv::type_of(mv::random_key(0)), "uint32[2]");
  EXPECT_EQ(mv::type_of(mv::split(mv::random_key(0))), "uint32[2,2]");
  const auto mesh = mv::make_mesh({4, 2}, {"i", "j"});
  const auto fold_fn =
      mv::shard_map([](const Array& rng) { return mv::fold_in(rng, mv::axis_index("i")); }, mesh,
                    {P()}, P({"i", "j"}));
  const auto out = fold_fn(mv::random_key(0));
  EXPECT_EQ(mv::type_of(out), "uint32[16]");
  const auto keys = out.to_host<uint32_t>();
  for (int i = 0; i < 4; ++i) {
    // Device 2i and 2i + 1 (the same 'i', both 'j'): one key; it is fold_in(key, i).
    EXPECT_EQ(keys[4 * i], keys[4 * i + 2]);
    EXPECT_EQ(keys[4 * i + 1], keys[4 * i + 3]);
    const auto host = mv::fold_in(mv::random_key(0), static_cast<uint32_t>(i)).to_host<uint32_t>();
    EXPECT_EQ(keys[4 * i], host[0]);
    EXPECT_EQ(keys[4 * i + 1], host[1]);
    for (int other = 0; other < i; ++other)
      EXPECT_FALSE(keys[4 * i] == keys[4 * other] && keys[4 * i + 1] == keys[4 * other + 1]);
  }
  // "Device 0: RNG=[a b]": numpy prints a uint32 key's two words.
  EXPECT_EQ(out.to_string().front(), '[');
}
