// Shapes whose sizes overflow int64 (or have negative dimensions) are meshvk::Errors wherever a
// shape is made: creation, broadcasting, reshape, concatenate/stack, pad, take, one_hot, matmul,
// random, device_put from the host, and meshes (library and CLI). Before, zeros({1 << 62, 4})
// was accepted with a wrapped size and sum(zeros({1 << 62, 3}) + 1) ran away with memory.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

namespace {

constexpr int64_t k62 = int64_t{1} << 62;
constexpr int64_t k40 = int64_t{1} << 40;
// The largest dimension whose byte size (4 per element) still fits int64.
constexpr int64_t kMaxDim = std::numeric_limits<int64_t>::max() / 4;

}  // namespace

TEST(ShapeLimits, CreationChecksTheSize) {
  expect_error([] { mv::zeros({k62, 4}); }, "too large");
  expect_error([] { mv::ones({k62, 4}, mv::DType::int32); }, "ones");
  expect_error([] { mv::full({4, k62, 2}, 1.0f); }, "full");
  expect_error([] { mv::zeros({-1, 4}); }, "negative dimension");
  expect_error([] { mv::zeros({0, k62, 4}); }, "too large");  // numpy rejects it too
  const auto mesh = mv::make_mesh({8}, {"x"});
  expect_error([] { mv::zeros({k62, 8}, mv::DType::float32, mv::NamedSharding(mv::make_mesh({8}, {"x"}), P("x"))); },
               "too large");
  expect_error([&] { mv::full({8, k62}, 2.0f, mv::NamedSharding(mesh, P("x"))); }, "too large");
  // The runaway: now an Error at once.
  expect_error([] { mv::sum(mv::zeros({k62, 3}) + 1); }, "too large");
  // Zero-size arrays with a large (but representable) other dimension are fine.
  const mv::Array empty = mv::zeros({0, kMaxDim});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_EQ(mv::transpose(empty).shape(), (mv::Shape{kMaxDim, 0}));
  expect_runtime_usable();
}

TEST(ShapeLimits, HostValuesCannotFillAWrappedShape) {
  const std::vector<float> none;
  // (2^62, 4) once "held" 0 elements, so no values passed for it.
  expect_error([&] { mv::array(std::span<const float>(none), mv::Shape{k62, 4}); }, "too large");
  expect_error([&] { mv::array(std::span<const float>(none), mv::Shape{-2, 0}); }, "negative");
  const auto mesh = mv::make_mesh({8}, {"x"});
  expect_error([&] { mv::device_put(std::span<const float>(none), mv::Shape{k62, 4}, mv::NamedSharding(mesh, P())); },
               "too large");
  expect_error([] { mv::arange(0.0f, 1e30f); }, "arange");
  expect_runtime_usable();
}

TEST(ShapeLimits, TooBigForAnyDeviceIsAClearError) {
  // Representable, but more than a device's memory: the allocator names the device and budget.
  expect_error([] { mv::zeros({k40}); }, "out of memory on device 0");
  expect_error([] { mv::arange(0.0f, 1e15f); }, "out of memory on device 0");
  expect_error([] { mv::sum(mv::zeros({1 << 20, 1}) + mv::zeros({1, 1 << 20})).to_host<float>(); },
               "out of memory");
  expect_runtime_usable();
}

TEST(ShapeLimits, BroadcastReshapeAndJoinsCheckTheirResults) {
  const mv::Array a = mv::zeros({0, 1, k40});
  const mv::Array b = mv::zeros({0, k40, 1});
  expect_error([&] { a + b; }, "too large");
  expect_error([&] { mv::where(a > 0.0f, a, b); }, "too large");
  expect_error([] { mv::broadcast_to(mv::scalar(1.0f), {-1}); }, "negative");
  expect_error([] { mv::broadcast_to(mv::zeros({0, 1}), {0, k62}); }, "too large");

  const mv::Array e = mv::zeros({0});
  expect_error([&] { e.reshape({k62, 4, 0}); }, "reshape");
  expect_error([&] { e.reshape({0, k62, 4}); }, "reshape");
  expect_error([&] { e.reshape({-1, k62, k62}); }, "overflow");
  expect_error([&] { e.reshape({-3, 0}); }, "negative");

  const mv::Array half = mv::zeros({0, kMaxDim / 2 + 1});
  expect_error([&] { mv::concatenate({half, half}, 1); }, "too large");
  const mv::Array big = mv::zeros({0, kMaxDim});
  expect_error([&] { mv::concatenate({big, big, big, big, big}, 1); }, "concatenate");
  expect_error([&] { mv::stack({big, big}, 2); }, "too large");
  expect_error([] { mv::pad(mv::zeros({0, 4}), {{0, 0}, {std::numeric_limits<int64_t>::max() - 2, 5}}); },
               "overflows");
  expect_error([] { mv::pad(mv::zeros({0, 4}), {{0, 0}, {kMaxDim, 0}}); }, "too large");
  expect_runtime_usable();
}

TEST(ShapeLimits, TakeOneHotMatmulAndRandomCheckTheirResults) {
  const mv::Array x = mv::zeros({0, k40, 2});
  expect_error([&] { mv::take(x, mv::zeros({1 << 30, 0}, mv::DType::int32), 2); }, "too large");
  expect_error([] { mv::one_hot(mv::zeros({0, k40}, mv::DType::int32), 1 << 30); }, "too large");
  expect_error([] { mv::matmul(mv::zeros({k40, 0}), mv::zeros({0, k40})); }, "too large");
  expect_error([] { mv::einsum("ij,jk->ik", mv::zeros({k40, 0}), mv::zeros({0, k40})); }, "too large");
  const mv::Array key = mv::random_key(0);
  expect_error([&] { mv::uniform(key, {k62, 4}); }, "too large");
  expect_error([&] { mv::normal(key, {-1}); }, "negative");
  expect_runtime_usable();
}

TEST(ShapeLimits, MeshSizesAreChecked) {
  const std::vector<int> huge(6, 4096);
  const std::vector<std::string> names{"a", "b", "c", "d", "e", "f"};
  expect_error([&] { mv::Mesh(huge, names, {}, {}, "CPU"); }, "devices");
  expect_error([&] { mv::make_mesh(huge, names); }, "make_mesh");
  const std::vector<int> wraps(4, 1 << 16);  // 2^64: wrapped to 0
  expect_error([&] { mv::Mesh(wraps, {"a", "b", "c", "d"}, {}, {}, "CPU"); }, "devices");
  expect_error([&] { mv::make_mesh(wraps, {"a", "b", "c", "d"}); }, "make_mesh");
  expect_runtime_usable();
}

TEST(ShapeLimits, CliRejectsAnOverflowingMeshAtOnce) {
  const char* dir = std::getenv("MESHVK_BIN_DIR");
  ASSERT_TRUE(dir && *dir) << "MESHVK_BIN_DIR is not set (ctest sets it)";
  const std::string command = std::string("timeout 60 ") + dir +
                              "/meshvk visualize --shape 8 --mesh 4096x4096x4096x4096x4096x4096"
                              " --axes a,b,c,d,e,f 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = pclose(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 2) << output;
  EXPECT_NE(output.find("4096"), std::string::npos) << output;
  EXPECT_LT(seconds, 10.0) << output;
}

// Issue 31.7.1: this took 0.94 GB of memory and printed 164 MB; the picture is now refused at
// once, naming its size, the limit and the options that shrink it.
TEST(ShapeLimits, CliRefusesAPictureOverTheCharacterLimit) {
  const char* dir = std::getenv("MESHVK_BIN_DIR");
  ASSERT_TRUE(dir && *dir) << "MESHVK_BIN_DIR is not set (ctest sets it)";
  const std::string command =
      std::string("timeout 60 ") + dir +
      "/meshvk visualize --shape 8192,8192 --mesh 4096 --spec \"P(None,'x')\" --min-width 10000"
      " --max-width 10000 --scale 100 --platform CPU 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = pclose(p);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(WIFEXITED(status)) << output.substr(0, 2000);
  EXPECT_EQ(WEXITSTATUS(status), 2) << output.substr(0, 2000);
  EXPECT_LT(output.size(), 10000u);
  for (const char* part :
       {"the picture would be", "1000000 characters", "--scale", "scale (now 100)"})
    EXPECT_NE(output.find(part), std::string::npos) << part << " in:\n" << output.substr(0, 2000);
  EXPECT_LT(seconds, 10.0) << output.substr(0, 2000);
}
