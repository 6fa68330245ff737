#include "cpu_baselines.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

namespace meshvk::bench {

namespace {

// Runs body(part, begin, end) over [0, n) split into `threads` contiguous parts (multiples of 16
// elements), part 0 on the calling thread.
template <class Body>
void parallel_for(size_t n, int threads, const Body& body) {
  threads = std::max(threads, 1);
  const size_t part = (n / threads + 15) / 16 * 16;
  auto range = [&](int t) {
    const size_t begin = std::min(n, part * t);
    return std::pair{begin, t + 1 == threads ? n : std::min(n, begin + part)};
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t)
    workers.emplace_back([&body, t, r = range(t)] { body(t, r.first, r.second); });
  body(0, range(0).first, range(0).second);
  for (auto& w : workers) w.join();
}

}  // namespace

void cpu_sin_affine(const float* x, float* y, size_t n, int threads) {
  parallel_for(n, threads, [&](int, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) y[i] = 2.0f * std::sin(x[i]) + 1.0f;
  });
}

float cpu_sum(const float* x, size_t n, int threads) {
  std::vector<float> partial(std::max(threads, 1));
  parallel_for(n, threads, [&](int t, size_t begin, size_t end) {
    float s = 0;
    for (size_t i = begin; i < end; ++i) s += x[i];
    partial[t] = s;
  });
  float total = 0;
  for (float p : partial) total += p;
  return total;
}

void cpu_copy(const void* from, void* to, size_t bytes, int threads) {
  parallel_for(bytes, threads, [&](int, size_t begin, size_t end) {
    std::memcpy(static_cast<char*>(to) + begin, static_cast<const char*>(from) + begin,
                end - begin);
  });
}

}  // namespace meshvk::bench
