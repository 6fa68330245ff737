// What an outside review of robustness found crashing (2026-11-27 evening): arrays of two
// Runtimes meeting in one op or jit call (buffers of two Vulkan devices in one command), a piece
// larger than one allocation of the adapter's heap, host copies that do not fit, and load_npy of
// a file that never ends. Each is now an Error naming the problem, and the runtime stays usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::P;

TEST(RuntimeBoundaries, ArraysOfTwoRuntimesDoNotMeet) {
  mv::Runtime first({.num_devices = 2});
  const mv::Array a1 = mv::arange(8.0f).reshape({2, 4});
  mv::Runtime second({.num_devices = 2});
  const mv::Array a2 = mv::arange(8.0f).reshape({4, 2});
  expect_error([&] { (void)mv::matmul(a1, a2); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::einsum("ij,jk->ik", a1, a2); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::concatenate({a1.reshape({8}), a2.reshape({8})}); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::stack({a1, a2.reshape({2, 4})}); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::take(a1, mv::array({1, 0}), 0); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::gather(a1, mv::array({1, 0})); }, "different meshvk::Runtime");
  expect_error([&] { (void)mv::dynamic_update_slice(a1, a2.reshape({2, 4}), std::vector<int64_t>{0, 0}); },
               "different meshvk::Runtime");
  expect_error([&] { (void)mv::jit([](const mv::Array& a) { return a + 1.0f; })(a1); }, "other than the current one");
  EXPECT_EQ(mv::matmul(a2, a2.T()).shape(), (mv::Shape{4, 4}));  // the current one works on
}

TEST(RuntimeBoundaries, LimitsAreErrors) {
  // One piece past the heap's largest allocation (lavapipe's is 2 GiB): an Error before any
  // memory is taken, not a buffer the driver cannot back.
  expect_error([] { (void)mv::zeros({(int64_t{1} << 29) + 64}); }, "out of memory");
  // Sizes past what any device holds (a host copy that does not fit is an Error too: checked by
  // hand, as its test would need an allocation that Linux's overcommit may grant).
  expect_error([] { (void)mv::broadcast_to(mv::array({1.0f}), {int64_t{1} << 62}).to_host<float>(); }, "too large");
  // A budget under 1 MiB, as the environment variable refuses it.
  expect_error([] { mv::Runtime tiny({.num_devices = 1, .memory_per_device = 1}); }, "at least 1 MiB");
  // load_npy of a file that never ends reads its header, not the whole file.
  expect_error([] { (void)mv::load_npy("/dev/zero"); }, "not a .npy file");
  expect_runtime_usable();
}
