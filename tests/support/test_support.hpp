#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <typeinfo>
#include <vector>

#include "meshvk/array.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/runtime.hpp"

// Sets (or, with a null value, unsets) an environment variable for a scope and puts back what
// was there, even when an ASSERT leaves the test early.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* was = std::getenv(name)) saved_ = was;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      setenv(name_, saved_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// Runs `body`, expecting a meshvk::Error whose message contains `needle` (any other exception,
// or none, fails the test).
template <class F>
void expect_error(F body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "no meshvk::Error (expected one mentioning '" << needle << "')";
  } catch (const meshvk::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a " << typeid(e).name() << " instead of meshvk::Error: " << e.what();
  }
}

// The runtime still answers a valid call (after errors).
inline void expect_runtime_usable() {
  EXPECT_EQ(meshvk::sum(meshvk::ones({4}) + 1.0f).to_host<float>()[0], 8.0f);
}

// The message of the meshvk::Error that f throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const meshvk::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The runtime every test of the binary shares (8 virtual devices under ctest).
meshvk::Runtime& test_runtime();

// The golden outputs (tests/data/golden); MESHVK_GOLDEN_DIR points elsewhere.
inline std::string golden_dir() {
  const char* dir = std::getenv("MESHVK_GOLDEN_DIR");
  return dir && *dir ? dir : MESHVK_TEST_DATA_DIR "/golden";
}

// Reproducible test data: n floats uniform in [lo, hi).
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Host values as an uncommitted array on device 0.
inline meshvk::Array host_array(const std::vector<float>& v, meshvk::Shape shape) {
  return meshvk::array(std::span<const float>(v), std::move(shape));
}
// A 1-D array of v.
inline meshvk::Array host_array(const std::vector<float>& v) {
  return host_array(v, {static_cast<int64_t>(v.size())});
}

// Host values laid out as `sharding` (committed).
inline meshvk::Array placed_array(const std::vector<float>& v, meshvk::Shape shape, const meshvk::Sharding& sharding) {
  return meshvk::device_put(std::span<const float>(v), std::move(shape), sharding);
}

// Tests of per-device pieces past one binding (hundreds of MiB) peak at 8-15 GB under
// AddressSanitizer (measured), more than CI machines can be assumed to have: the sanitizer run
// skips them and keeps the tests that shrink the binding limits instead (the same code paths);
// the Release run covers the real sizes.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_FULL_SIZE_UNDER_ASAN() \
  GTEST_SKIP() << "full-size buffers are tested in the Release build (8-15 GB under ASan)"
#else
#define SKIP_FULL_SIZE_UNDER_ASAN() (void)0
#endif
