// The coefficients of engine/src/kernels/mathlib/erf64.inc: Chebyshev interpolants in long double
// (degree 12 for x Q(x^2 - 1/2) below 1, 15 for erf(c) + t Q(t) on [1, 2), [2, 3), [3, 4]),
// rounded to double; prints the combined scheme's error in double on a fine grid (stderr) and
// the GLSL lines (stdout). Not part of the build:
//   g++ -std=c++20 -O2 tests/exhaustive/erf64_fit.cpp -o /tmp/erf64_fit && /tmp/erf64_fit
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
using ld = long double;
std::vector<double> fit(std::function<ld(ld)> F, ld a, ld b, int n) {
  int N = n + 1;
  ld mid = (a + b) / 2, half = (b - a) / 2;
  std::vector<ld> fv(N), c(N, 0);
  for (int k = 0; k < N; ++k) fv[k] = F(mid + half * std::cos(M_PIl * (k + 0.5L) / N));
  for (int j = 0; j < N; ++j) {
    ld s = 0;
    for (int k = 0; k < N; ++k) s += fv[k] * std::cos(M_PIl * j * (k + 0.5L) / N);
    c[j] = 2 * s / N;
  }
  c[0] /= 2;
  std::vector<std::vector<ld>> T(N, std::vector<ld>(N, 0));
  T[0][0] = 1;
  if (N > 1) T[1][1] = 1;
  for (int j = 2; j < N; ++j)
    for (int k = 0; k < N; ++k) T[j][k] = (k ? 2 * T[j - 1][k - 1] : 0) - T[j - 2][k];
  std::vector<ld> m(N, 0);
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < N; ++k) m[k] += c[j] * T[j][k];
  std::vector<double> out(N);
  for (int k = 0; k < N; ++k) out[k] = (double)(m[k] / std::pow(half, (ld)k));
  return out;
}
double horner(const std::vector<double>& p, double t) {
  double r = p.back();
  for (int k = (int)p.size() - 2; k >= 0; --k) r = r * t + p[k];
  return r;
}
std::string hx(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  char b[64];
  snprintf(b, 64, "mvk_f64(0x%08xu, 0x%08xu)", (unsigned)(u >> 32), (unsigned)u);
  return b;
}
int main() {
  const int D = 15;
  std::vector<std::vector<double>> P(4);
  double A[4];
  auto Q0 = [](ld z) -> ld {
    if (z == 0) return 2 / std::sqrt(M_PIl);
    ld x = std::sqrt(z);
    return std::erf(x) / x;
  };
  P[0] = fit(Q0, 0, 1, 12);
  P[0].resize(D + 1, 0.0);
  A[0] = 0;
  for (int i = 1; i < 4; ++i) {
    ld C = i + 0.5L;
    ld ec = std::erf(C);
    auto Q = [&](ld t) -> ld {
      if (std::fabs(t) < 1e-12L) return 2 / std::sqrt(M_PIl) * std::exp(-C * C);
      return (std::erf(C + t) - ec) / t;
    };
    P[i] = fit(Q, -0.5L, 0.5L, D);
    A[i] = (double)ec;
  }
  // error check of the combined scheme in double
  ld worst[4] = {0, 0, 0, 0};
  for (int i = 0; i <= 400000; ++i) {
    double x = 4.0 * i / 400000.0;
    int k = x >= 3 ? 3 : (int)x;
    double t = (k ? x : x * x) - (k + 0.5);
    double s = k ? t : x;
    double r = A[k] + s * horner(P[k], t);
    ld ex = std::erf((ld)x);
    ld e = k ? std::fabs((ld)r - ex) : std::fabs(((ld)r - ex) / ex);
    if (x > 0 && e > worst[k]) worst[k] = e;
  }
  for (int k = 0; k < 4; ++k)
    fprintf(stderr, "interval %d: %s err 2^%.2f\n", k, k ? "abs" : "rel",
            std::log2((double)worst[k]));
  printf("  precise double a = mvk_erf_pick64(b1, b2, b3, 0.0f, %s,\n      %s, %s);\n",
         hx(A[1]).c_str(), hx(A[2]).c_str(), hx(A[3]).c_str());
  for (int k = D; k >= 0; --k) {
    printf("  p = %smvk_erf_pick64(b1, b2, b3, %s, %s,\n      %s, %s);\n", k == D ? "" : "p * t + ",
           hx(P[0][k]).c_str(), hx(P[1][k]).c_str(), hx(P[2][k]).c_str(), hx(P[3][k]).c_str());
  }
}
