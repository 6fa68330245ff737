// Matmul kernels (kernels/matmul.hpp) against a plain CPU reference with double accumulation:
// awkward sizes, k = 0, empty outputs, transposes, batches with broadcast strides, int32
// wrapping, operands and results larger than one binding, on both kernels: the blocked kernel
// lavapipe uses and the tiled kernel for GPUs (forced with MESHVK_MATMUL_KERNEL=tiled).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/sharded_value.hpp"
#include "kernels/matmul.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::kernels::MatmulShape;

namespace {

// Sets MESHVK_MATMUL_KERNEL for the lifetime of the object (the kernels read it at every call).
class KernelChoice {
 public:
  explicit KernelChoice(const std::string& kernel) {
    if (kernel.empty())
      unsetenv("MESHVK_MATMUL_KERNEL");
    else
      setenv("MESHVK_MATMUL_KERNEL", kernel.c_str(), 1);
  }
  ~KernelChoice() { unsetenv("MESHVK_MATMUL_KERNEL"); }
  KernelChoice(const KernelChoice&) = delete;
  KernelChoice& operator=(const KernelChoice&) = delete;
};

// The kernels every case runs on: the adapter's choice, and the other one forced.
const std::vector<std::string> kKernels = {"blocked", "tiled"};

mv::detail::RuntimeState& state() {
  return *test_runtime().state();
}

// 32-bit words of either dtype.
using Words = std::vector<uint32_t>;

Words random_words(size_t n, mv::DType dtype, std::mt19937& rng, int int_range = 9) {
  Words w(n);
  if (dtype == mv::DType::float32) {
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& x : w) {
      const float f = d(rng);
      std::memcpy(&x, &f, 4);
    }
  } else {
    std::uniform_int_distribution<int32_t> d(-int_range, int_range);
    for (auto& x : w) x = static_cast<uint32_t>(d(rng));
  }
  return w;
}

float as_float(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

std::shared_ptr<mv::detail::DeviceBuffer> upload(const Words& w, mv::DType dtype, int device) {
  const mv::exec::ShardedValue v = mv::exec::upload(
      state(), w.data(), {static_cast<int64_t>(w.size())}, dtype, mv::SingleDeviceSharding(device));
  return v.shards.at(0);
}

Words download(const std::shared_ptr<mv::detail::DeviceBuffer>& b, size_t count, mv::DType dtype) {
  Words w(count);
  const mv::exec::ShardedValue v{
      {static_cast<int64_t>(count)}, dtype, mv::SingleDeviceSharding(b->device()), {b}};
  mv::exec::download(state(), v, w.data());
  return w;
}

size_t operand_words(int64_t batch, int64_t stride, int64_t matrix) {
  return static_cast<size_t>((batch - 1) * stride + matrix);
}

// Runs the kernel on `device`; C starts out as garbage so that every element must be written.
Words run_matmul(const MatmulShape& s, const Words& a, const Words& b, int device = 0) {
  auto& rt = state();
  const auto ab = upload(a, s.dtype, device), bb = upload(b, s.dtype, device);
  const size_t c_words = static_cast<size_t>(s.batch * s.m * s.n);
  const auto cb = upload(Words(c_words, 0x7fc00001u), s.dtype, device);  // NaN
  mv::detail::Recording rec = rt.begin(device);
  rec.wait_for(ab->ready());
  rec.wait_for(bb->ready());
  rec.wait_for(cb->ready());
  mv::kernels::record_matmul(rt, rec, s, *ab, *bb, *cb);
  const mv::detail::Fence done = rt.submit(std::move(rec));
  ab->used_by(done);
  bb->used_by(done);
  cb->written_by(done);
  return download(cb, c_words, s.dtype);
}

// op(A)[i][k] and op(B)[k][j] of batch entry `e`, as the shape describes the layouts.
size_t a_index(const MatmulShape& s, int64_t e, int64_t i, int64_t k) {
  return static_cast<size_t>(e * s.a_batch_stride + (s.trans_a ? k * s.m + i : i * s.k + k));
}
size_t b_index(const MatmulShape& s, int64_t e, int64_t k, int64_t j) {
  return static_cast<size_t>(e * s.b_batch_stride + (s.trans_b ? j * s.k + k : k * s.n + j));
}

// Compares every `row_step`-th row of each entry (and the last) with the reference.
::testing::AssertionResult matches_reference(const MatmulShape& s, const Words& a, const Words& b,
                                             const Words& got, int64_t row_step = 1) {
  for (int64_t e = 0; e < s.batch; ++e)
    for (int64_t i = 0; i < s.m; i = (i + row_step < s.m || i == s.m - 1) ? i + row_step : s.m - 1)
      for (int64_t j = 0; j < s.n; ++j) {
        const size_t at = static_cast<size_t>((e * s.m + i) * s.n + j);
        if (s.dtype == mv::DType::float32) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < s.k; ++k) {
            const double p =
                double(as_float(a[a_index(s, e, i, k)])) * as_float(b[b_index(s, e, k, j)]);
            sum += p;
            magnitude += std::fabs(p);
          }
          const double g = as_float(got[at]);
          if (!(std::fabs(g - sum) <= 1e-4 * magnitude + 1e-6))
            return ::testing::AssertionFailure()
                   << "C[" << e << "][" << i << "][" << j << "] = " << g << ", want " << sum;
        } else {
          uint32_t sum = 0;  // wrapping, as int32 matmul on the device
          for (int64_t k = 0; k < s.k; ++k) sum += a[a_index(s, e, i, k)] * b[b_index(s, e, k, j)];
          if (got[at] != sum)
            return ::testing::AssertionFailure()
                   << "C[" << e << "][" << i << "][" << j << "] = " << int32_t(got[at]) << ", want "
                   << int32_t(sum);
        }
      }
  return ::testing::AssertionSuccess();
}

std::string describe(const MatmulShape& s, const std::string& kernel) {
  return kernel + " " + std::string(mv::dtype_name(s.dtype)) + " batch " + std::to_string(s.batch) +
         " m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
         (s.trans_a ? " A^T" : "") + (s.trans_b ? " B^T" : "") + " strides " +
         std::to_string(s.a_batch_stride) + "," + std::to_string(s.b_batch_stride);
}

// Dense strides unless a batch stride is given as 0 (broadcast).
MatmulShape shape(int64_t m, int64_t n, int64_t k, mv::DType dtype = mv::DType::float32,
                  bool ta = false, bool tb = false, int64_t batch = 1, bool broadcast_a = false,
                  bool broadcast_b = false) {
  MatmulShape s{batch, m, n, k, ta, tb, broadcast_a ? 0 : m * k, broadcast_b ? 0 : k * n, dtype};
  return s;
}

void check(const MatmulShape& s, std::mt19937& rng, int device = 0, int64_t row_step = 1) {
  for (const std::string& kernel : kKernels) {
    KernelChoice choice(kernel);
    const Words a = random_words(
        std::max<size_t>(operand_words(s.batch, s.a_batch_stride, s.m * s.k), 1), s.dtype, rng);
    const Words b = random_words(
        std::max<size_t>(operand_words(s.batch, s.b_batch_stride, s.k * s.n), 1), s.dtype, rng);
    const Words got = run_matmul(s, a, b, device);
    ASSERT_TRUE(matches_reference(s, a, b, got, row_step)) << describe(s, kernel);
  }
}

}  // namespace

TEST(MatmulKernel, AwkwardSquareSizes) {
  std::mt19937 rng(1);
  for (const int64_t n : {1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 127}) check(shape(n, n, n), rng);
}

TEST(MatmulKernel, LargeOddSquare) {
  std::mt19937 rng(2);
  check(shape(1023, 1023, 1023), rng, 0, 7);
}

TEST(MatmulKernel, RectangularAndTransposed) {
  std::mt19937 rng(3);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      check(shape(129, 65, 257, mv::DType::float32, ta, tb), rng);
      check(shape(33, 17, 5, mv::DType::float32, ta, tb), rng);
      check(shape(1, 300, 64, mv::DType::float32, ta, tb), rng);    // row vector
      check(shape(300, 1, 64, mv::DType::float32, ta, tb), rng);    // column vector
      check(shape(64, 256, 128, mv::DType::float32, ta, tb), rng);  // aligned: no repacking
      // Operands with vec4-aligned stored rows but odd k or odd other dimensions, repacked a
      // vec4 or a 4 x 4 block at a time.
      check(shape(20, 64, 7, mv::DType::float32, ta, tb), rng);
      check(shape(36, 40, 9, mv::DType::float32, ta, tb), rng);
      check(shape(12, 8, 16, mv::DType::int32, ta, tb, 3), rng);
      // A long k (at 16 lanes A is packed from k = 2048 on), rows and columns past a lane group.
      check(shape(19, 2052, 23, mv::DType::float32, ta, tb), rng);
    }
}

TEST(MatmulKernel, EmptyContractionGivesZeros) {
  std::mt19937 rng(4);
  for (const auto dtype : {mv::DType::float32, mv::DType::int32}) {
    check(shape(5, 7, 0, dtype), rng);
    check(shape(3, 4, 0, dtype, true, true, 3), rng);
  }
}

TEST(MatmulKernel, EmptyOutputsRecordNothing) {
  auto& rt = state();
  for (const std::string& kernel : kKernels) {
    KernelChoice choice(kernel);
    for (const auto& s : {shape(0, 5, 3), shape(4, 0, 3), shape(0, 0, 0)}) {
      const uint64_t before = rt.dispatches.load();
      EXPECT_TRUE(run_matmul(s, Words(16), Words(16)).empty());
      EXPECT_EQ(rt.dispatches.load(), before) << describe(s, kernel);
    }
  }
}

TEST(MatmulKernel, BatchesWithBroadcastStrides) {
  std::mt19937 rng(5);
  for (const auto dtype : {mv::DType::float32, mv::DType::int32}) {
    check(shape(17, 19, 23, dtype, false, false, 3), rng);
    check(shape(17, 19, 23, dtype, false, false, 4, true, false), rng);   // one A for every entry
    check(shape(17, 19, 23, dtype, false, false, 4, false, true), rng);   // one B for every entry
    check(shape(16, 128, 32, dtype, false, false, 5, false, true), rng);  // aligned, no repacking
    check(shape(9, 10, 11, dtype, true, true, 2, false, false), rng);
    check(shape(2, 3, 4, dtype, false, false, 300), rng);  // many small entries in one dispatch
  }
  // Strides larger than the matrices (entries of a bigger array).
  MatmulShape s = shape(8, 8, 8);
  s.batch = 3;
  s.a_batch_stride = 70;
  s.b_batch_stride = 128;
  check(s, rng);
}

// The blocked kernel reads an untransposed B as stored where that is its packed layout (one
// panel as wide as B, no padding along k or n, entries back to back), and packs it otherwise.
TEST(MatmulKernel, UntransposedBReadAsStoredWhereItIsPacked) {
  std::mt19937 rng(8);
  for (const auto dtype : {mv::DType::float32, mv::DType::int32}) {
    check(shape(40, 128, 64, dtype), rng);                         // 16 lanes: one panel
    check(shape(40, 64, 64, dtype, false, false, 3), rng);         // 8 lanes, batched
    check(shape(40, 128, 64, dtype, false, false, 3), rng);        // batched
    check(shape(9, 128, 64, dtype, false, false, 4, false, true), rng);  // one B for every entry
    check(shape(17, 128, 66, dtype), rng);                         // k padded: packed
    check(shape(9, 256, 128, dtype), rng);                         // two panels: packed
  }
  MatmulShape gaps = shape(8, 128, 12);  // entries of a bigger array: not back to back
  gaps.batch = 3;
  gaps.b_batch_stride = 2000;
  check(gaps, rng);
}

TEST(MatmulKernel, Int32WrapsAround) {
  std::mt19937 rng(6);
  for (const std::string& kernel : kKernels) {
    KernelChoice choice(kernel);
    const MatmulShape s = shape(37, 41, 129, mv::DType::int32);
    const Words a = random_words(s.m * s.k, s.dtype, rng, 1 << 20),
                b = random_words(s.k * s.n, s.dtype, rng, 1 << 20);
    EXPECT_TRUE(matches_reference(s, a, b, run_matmul(s, a, b))) << kernel;
  }
  for (const bool ta : {false, true}) check(shape(65, 66, 67, mv::DType::int32, ta, !ta), rng);
}

TEST(MatmulKernel, RandomShapes) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> size(1, 150), coin(0, 1), batch(1, 3);
  for (int i = 0; i < 12; ++i) {
    const auto dtype = coin(rng) ? mv::DType::float32 : mv::DType::int32;
    const int bt = batch(rng);
    check(shape(size(rng), size(rng), size(rng), dtype, coin(rng), coin(rng), bt,
                bt > 1 && coin(rng), bt > 1 && coin(rng)),
          rng);
  }
}

TEST(MatmulKernel, RunsOnAnyVirtualDevice) {
  std::mt19937 rng(8);
  const int last = test_runtime().num_devices() - 1;
  check(shape(40, 50, 60), rng, last);
}

TEST(MatmulKernel, OperandsAndResultsBeyondOneBinding) {
  // lavapipe binds at most 128 MiB per storage buffer (2 GiB per RGBA32 texel buffer): A of
  // 8400 x 4096 float32 (131 MiB; split into row blocks by the tiled kernel, which reads storage
  // buffers) and C of 8400 x 4100 (131 MiB; split by both kernels).
  std::mt19937 rng(9);
  for (const std::string& kernel : kKernels) {
    KernelChoice choice(kernel);
    {
      const MatmulShape s = shape(8400, 8, 4096);
      const Words a = random_words(s.m * s.k, s.dtype, rng),
                  b = random_words(s.k * s.n, s.dtype, rng);
      const Words got = run_matmul(s, a, b);
      // Reference for a sample of rows, including both ends and the binding boundaries.
      for (const int64_t i : {int64_t{0}, int64_t{1}, int64_t{8127}, int64_t{8128}, int64_t{8191},
                              int64_t{8192}, s.m - 1}) {
        for (int64_t j = 0; j < s.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < s.k; ++k) {
            const double p = double(as_float(a[i * s.k + k])) * as_float(b[k * s.n + j]);
            sum += p;
            magnitude += std::fabs(p);
          }
          ASSERT_NEAR(as_float(got[i * s.n + j]), sum, 1e-4 * magnitude + 1e-6)
              << kernel << " row " << i;
        }
      }
    }
    {
      const MatmulShape s = shape(8400, 4100, 3);
      const Words a = random_words(s.m * s.k, s.dtype, rng),
                  b = random_words(s.k * s.n, s.dtype, rng);
      EXPECT_TRUE(matches_reference(s, a, b, run_matmul(s, a, b))) << kernel;
    }
  }
}

TEST(MatmulKernel, UnknownKernelNameIsAnError) {
  KernelChoice choice("fastest");
  std::mt19937 rng(10);
  try {
    run_matmul(shape(2, 2, 2), random_words(4, mv::DType::float32, rng),
               random_words(4, mv::DType::float32, rng));
    FAIL() << "expected an error";
  } catch (const mv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MESHVK_MATMUL_KERNEL=fastest"), std::string::npos)
        << e.what();
  }
}
