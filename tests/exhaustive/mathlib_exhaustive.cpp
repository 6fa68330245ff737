// The math library's full sweep (./meshvk.sh exhaustive): every float32 input of every unary
// function. The host copy is compared with long double libm, in ulps (one thread per core); with
// --device, the kernels' GLSL copy is run on the runtime's adapter in chunks of 2^24 inputs and
// compared bit for bit with the host copy (--stride N: every Nth input only, for a smoke run).
// Prints the max-ulp table README.md shows, with the largest error in fractions of an ulp and the
// count of results not correctly rounded; --float64 sweeps the float64 variants (sin, cos, tan,
// exp, tanh, sigmoid, log, log2, erf and arctan2) instead (the device sweep compares with the
// variant the runtime picks for its adapter). arctan2, having two arguments, is sampled, and
// only when named: --pairs N (default 2^24) random pairs of mathlib_check::atan2_pair's four
// kinds, quotients near powers of two among them. With --speed instead, the throughput of the library and of the driver's built-ins
// (MESHVK_FAST_MATH=1), arctan2's too when named.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graph/array_impl.hpp"
#include "mathlib_check.hpp"
#include "meshvk/meshvk.hpp"
#include "runtime/runtime_state.hpp"

namespace mv = meshvk;

namespace {

mv::Array apply(const std::string& name, const mv::Array& x) {
  static const std::pair<const char*, mv::Array (*)(const mv::Array&)> ops[] = {
      {"exp", mv::exp},     {"expm1", mv::expm1}, {"exp2", mv::exp2},      {"log", mv::log},
      {"log2", mv::log2},   {"log1p", mv::log1p}, {"sqrt", mv::sqrt},      {"rsqrt", mv::rsqrt},
      {"asinh", mv::asinh}, {"acosh", mv::acosh}, {"atanh", mv::atanh},    {"tanh", mv::tanh},
      {"sinh", mv::sinh},   {"cosh", mv::cosh},   {"sigmoid", mv::sigmoid},
      {"sin", mv::sin},     {"cos", mv::cos},     {"tan", mv::tan},        {"arcsin", mv::arcsin},
      {"arccos", mv::arccos}, {"arctan", mv::arctan}, {"erf", mv::erf},    {"erfinv", mv::erfinv}};
  for (const auto& [n, f] : ops)
    if (name == n) return f(x);
  throw mv::Error("no public op for " + name);
}

// Every `stride`-th input (1: all of them; more for a quick smoke run).
uint64_t stride = 1;

struct Worst {
  uint64_t ulps = 0;
  uint32_t x = 0;
  uint64_t not_rounded = 0;  // results other than the correctly rounded one
  long double error = 0;     // the largest distance from the exact value, in ulps
};

// --float64: the float64 variants' host copies (those with host_float64, and arctan2's) instead
// of the default ones.
bool float64 = false;

// --pairs: how many (y, x) pairs arctan2 is sampled on.
uint64_t pairs = 1ull << 24;

Worst sweep_host(const mathlib_check::UnaryFunction& f) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  if (const char* t = std::getenv("MESHVK_EXHAUSTIVE_THREADS")) threads = std::max(1, std::atoi(t));
  const auto host = f.host_for(float64);
  std::vector<Worst> worst(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (uint64_t u = t * stride; u < (1ull << 32); u += threads * stride) {
        const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
        const float y = host(x);
        const long double exact = f.reference(static_cast<long double>(x));
        const float rounded = static_cast<float>(exact);
        const uint64_t d = mathlib_check::ulp_distance(y, rounded);
        if (d > worst[t].ulps) worst[t].ulps = d, worst[t].x = static_cast<uint32_t>(u);
        if (d != 0) ++worst[t].not_rounded;
        if (std::isfinite(y) && std::isfinite(rounded)) {
          int e = 0;
          std::frexp(rounded, &e);
          const long double err =
              std::fabs(static_cast<long double>(y) - exact) / std::ldexp(1.0L, std::max(e - 24, -149));
          worst[t].error = std::max(worst[t].error, err);
        }
      }
    });
  for (auto& th : pool) th.join();
  Worst w;
  for (const Worst& t : worst) {
    if (t.ulps > w.ulps) w.ulps = t.ulps, w.x = t.x;
    w.not_rounded += t.not_rounded;
    w.error = std::max(w.error, t.error);
  }
  return w;
}

// The number of inputs whose device result differs from the host copy's bits (NaNs match NaNs).
uint64_t sweep_device(const mathlib_check::UnaryFunction& f) {
  constexpr uint64_t kChunk = 1ull << 24;
  auto& rt = *mv::Runtime::current().state();
  const auto host = f.host_for(rt.mathlib_float64(rt.device().adapter()));
  std::vector<float> xs(kChunk);
  uint64_t differ = 0;
  for (uint64_t base = 0; base < (1ull << 32); base += kChunk * stride) {
    for (uint64_t i = 0; i < kChunk; ++i)
      xs[i] = std::bit_cast<float>(static_cast<uint32_t>(base + i * stride));
    const auto got = apply(f.name, mv::array(std::span<const float>(xs),
                                             mv::Shape{static_cast<int64_t>(kChunk)}))
                         .to_host<float>();
    for (uint64_t i = 0; i < kChunk; ++i) {
      const float want = host(xs[i]);
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want) &&
          !(std::isnan(got[i]) && std::isnan(want)))
        if (++differ <= 3)
          std::printf("  %s(%a): device %a, host %a\n", f.name, xs[i], got[i], want);
    }
  }
  return differ;
}

// arctan2's pairs: chunk c (2^16 pairs) comes from its own generator, seeded with c, so the
// sample is the same whatever the thread count; pair i of a chunk is of kind i % 4.
constexpr uint64_t kPairChunk = 1ull << 16;
void atan2_chunk(uint64_t c, std::vector<std::pair<float, float>>& out) {
  std::mt19937_64 rng(c);
  out.clear();
  for (uint64_t i = 0; i < kPairChunk && c * kPairChunk + i < pairs; ++i)
    out.push_back(mathlib_check::atan2_pair(rng, static_cast<unsigned>(i)));
}

float (*atan2_host(bool f64))(float, float) {
  return f64 ? meshvk::mathlib::host::mvk_atan2_64 : meshvk::mathlib::host::mvk_atan2;
}

// arctan2's host copy against long double atan2 on the sampled pairs.
Worst sweep_atan2_host(std::pair<float, float>& worst_pair) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  if (const char* t = std::getenv("MESHVK_EXHAUSTIVE_THREADS")) threads = std::max(1, std::atoi(t));
  const auto host = atan2_host(float64);
  const uint64_t chunks = (pairs + kPairChunk - 1) / kPairChunk;
  std::vector<Worst> worst(threads);
  std::vector<std::pair<float, float>> at(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<std::pair<float, float>> ps;
      for (uint64_t c = t; c < chunks; c += threads) {
        atan2_chunk(c, ps);
        for (const auto& [y, x] : ps) {
          const float r = host(y, x);
          const float rounded = static_cast<float>(
              std::atan2(static_cast<long double>(y), static_cast<long double>(x)));
          const uint64_t d = mathlib_check::ulp_distance(r, rounded);
          if (d > worst[t].ulps) worst[t].ulps = d, at[t] = {y, x};
          if (d != 0) ++worst[t].not_rounded;
          if (std::isfinite(r))
            worst[t].error = std::max(worst[t].error, mathlib_check::atan2_error_ulps(r, y, x));
        }
      }
    });
  for (auto& th : pool) th.join();
  Worst w;
  for (unsigned t = 0; t < threads; ++t) {
    if (worst[t].ulps > w.ulps || t == 0) w.ulps = worst[t].ulps, worst_pair = at[t];
    w.not_rounded += worst[t].not_rounded;
    w.error = std::max(w.error, worst[t].error);
  }
  return w;
}

// The number of sampled pairs whose device result differs from the host copy's bits.
uint64_t sweep_atan2_device() {
  auto& rt = *mv::Runtime::current().state();
  const auto host = atan2_host(rt.mathlib_float64(rt.device().adapter()));
  const uint64_t chunks = (pairs + kPairChunk - 1) / kPairChunk;
  std::vector<std::pair<float, float>> ps;
  std::vector<float> ys, xs;
  uint64_t differ = 0;
  for (uint64_t c = 0; c < chunks; c += 64) {  // 2^22 pairs a dispatch
    ys.clear(), xs.clear();
    for (uint64_t k = c; k < std::min(chunks, c + 64); ++k) {
      atan2_chunk(k, ps);
      for (const auto& [y, x] : ps) ys.push_back(y), xs.push_back(x);
    }
    const mv::Shape shape{static_cast<int64_t>(ys.size())};
    const auto got = mv::arctan2(mv::array(std::span<const float>(ys), shape),
                                 mv::array(std::span<const float>(xs), shape))
                         .to_host<float>();
    for (size_t i = 0; i < ys.size(); ++i)
      if (!mathlib_check::same_bits(got[i], host(ys[i], xs[i])))
        if (++differ <= 3)
          std::printf("  arctan2(%a, %a): device %a, host %a\n", ys[i], xs[i], got[i],
                      host(ys[i], xs[i]));
  }
  return differ;
}

// Elements per second of each function on the runtime's adapter over 16M floats (one device,
// median of 5), the library's and the driver's built-ins' (MESHVK_FAST_MATH=1).
double rate(const std::function<mv::Array()>& apply_once, int64_t size, mv::Runtime& rt) {
  std::vector<double> times;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const mv::Array y = apply_once();
    mv::detail::materialized(y);
    rt.synchronize();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin() + 1, times.end());  // the first run compiles the kernel
  return static_cast<double>(size) / times[3];
}

void speed(const std::vector<std::string>& only) {
  std::vector<float> host(size_t{16} << 20);
  std::mt19937 rng(5);
  for (float& v : host) v = std::uniform_real_distribution<float>(-10.0f, 10.0f)(rng);
  std::printf("| function | library (Melem/s) | MESHVK_FAST_MATH=1 (Melem/s) |\n|---|---|---|\n");
  for (const auto& f : mathlib_check::unary_functions()) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    double r[2];
    for (int fast = 0; fast < 2; ++fast) {
      setenv("MESHVK_FAST_MATH", fast ? "1" : "0", 1);
      mv::Runtime rt;
      const mv::Array x =
          mv::array(std::span<const float>(host), mv::Shape{static_cast<int64_t>(host.size())});
      r[fast] = rate([&] { return apply(f.name, x); }, x.size(), rt);
    }
    std::printf("| %s | %.0f | %.0f |\n", f.name, r[0] / 1e6, r[1] / 1e6);
    std::fflush(stdout);
  }
  if (std::find(only.begin(), only.end(), "arctan2") == only.end()) return;
  // arctan2(y, x) with y as above and x from the same range, reversed.
  const std::vector<float> other(host.rbegin(), host.rend());
  double r[2];
  for (int fast = 0; fast < 2; ++fast) {
    setenv("MESHVK_FAST_MATH", fast ? "1" : "0", 1);
    mv::Runtime rt;
    const mv::Shape shape{static_cast<int64_t>(host.size())};
    const mv::Array y = mv::array(std::span<const float>(host), shape);
    const mv::Array x = mv::array(std::span<const float>(other), shape);
    r[fast] = rate([&] { return mv::arctan2(y, x); }, y.size(), rt);
  }
  std::printf("| arctan2 | %.0f | %.0f |\n", r[0] / 1e6, r[1] / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  bool device = false, speed_only = false;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0)
      device = true;
    else if (std::strcmp(argv[i], "--speed") == 0)
      speed_only = true;
    else if (std::strcmp(argv[i], "--float64") == 0)
      float64 = true;
    else if (std::strcmp(argv[i], "--stride") == 0 && i + 1 < argc)
      stride = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--pairs") == 0 && i + 1 < argc)
      pairs = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else
      only.push_back(argv[i]);
  }
  if (speed_only) {
    speed(only);
    return 0;
  }
  std::unique_ptr<mv::Runtime> rt;
  if (device) rt = std::make_unique<mv::Runtime>();
  const bool unary =
      only.empty() ||
      std::any_of(only.begin(), only.end(), [](const std::string& n) { return n != "arctan2"; });
  std::printf(
      "| function | max ulp (%s) | worst input | max error (ulp) | not correctly rounded |%s\n",
      !unary        ? "sampled pairs"
      : stride == 1 ? "all 2^32 inputs"
                    : ("every " + std::to_string(stride) + "th input").c_str(),
      device ? " device bits |" : "");
  std::printf("|---|---|---|---|---|%s\n", device ? "---|" : "");
  int failed = 0;
  for (const auto& f : mathlib_check::unary_functions()) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    if (float64 && !f.host_float64) continue;
    const Worst w = sweep_host(f);
    std::printf("| %s%s | %llu | %a | %.9Lf | %llu |", f.name, float64 ? " (float64)" : "",
                static_cast<unsigned long long>(w.ulps), std::bit_cast<float>(w.x), w.error,
                static_cast<unsigned long long>(w.not_rounded));
    if (w.ulps > 1) ++failed;
    if (device) {
      const uint64_t d = sweep_device(f);
      std::printf(d == 0 ? " identical |" : " %llu differ |", static_cast<unsigned long long>(d));
      if (d) ++failed;
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (std::find(only.begin(), only.end(), "arctan2") != only.end()) {
    std::pair<float, float> at{};
    const Worst w = sweep_atan2_host(at);
    std::printf("| arctan2%s (%llu pairs) | %llu | (%a, %a) | %.9Lf | %llu |",
                float64 ? " (float64)" : "", static_cast<unsigned long long>(pairs),
                static_cast<unsigned long long>(w.ulps), at.first, at.second, w.error,
                static_cast<unsigned long long>(w.not_rounded));
    if (w.ulps > 1) ++failed;
    if (device) {
      const uint64_t d = sweep_atan2_device();
      std::printf(d == 0 ? " identical |" : " %llu differ |", static_cast<unsigned long long>(d));
      if (d) ++failed;
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}
