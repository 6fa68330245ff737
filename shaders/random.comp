#version 450
// Counter-based random numbers as jax.random makes them (threefry2x32, 20 rounds, with
// jax_threefry_partitionable=True, JAX's default since 0.5). One invocation per output element
// or key. The key is read from device memory, never passed through the host.
//
// Modes:
//   0 key pairs:     out[2i], out[2i+1] = threefry(key, (0, base + i))   (split; fold_in of a
//                    host constant with base = data and count = 1)
//   1 counter pairs: out[2i], out[2i+1] = threefry(key, (aux[2j], aux[2j+1])), j = base + i
//   2 fold_in:       out[0], out[1] = threefry(key, (0, aux[0]))
//   3 bits:          out[i] = b1 ^ b2 of threefry(key, (hi, lo)) of the element's global flat
//                    index, split into 32-bit halves (jax's iota_2x32_shape)
//   4 uniform:       bits -> float in [minval, minval + scale) as jax.random.uniform
//   5 normal:        uniform in [nextafter(-1, 0), 1) -> sqrt(2) * erfinv, as jax.random.normal
//
// Element i of this dispatch is local element base + i of the output piece; its global flat
// index is origin + sum_d coord_d * stride_d over the piece's (merged) dimensions.
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Key { uint key[2]; };
layout(std430, binding = 1) readonly buffer Aux { uint aux[]; };
layout(std430, binding = 2) writeonly buffer Out { uint data[]; };

const uint kMaxDims = 8u;
layout(push_constant) uniform Params {
  uint mode;
  uint count;  // elements (or key pairs) in this dispatch
  uint base;
  uint rank;   // dimensions used in extent / stride_lo / stride_hi, innermost last
  uvec2 origin;  // (low, high) words of the global flat index of the piece's first element
  float minval;
  float scale;  // maxval - minval, rounded to float32 as jax computes it
  uint extent[kMaxDims];
  uint stride_lo[kMaxDims];
  uint stride_hi[kMaxDims];
} pc;

const uint kKeyPairs = 0u, kCounterPairs = 1u, kFoldIn = 2u, kBits = 3u, kUniform = 4u,
           kNormal = 5u;

// ---- threefry2x32 (Salmon et al., Random123; jax._src.prng._threefry2x32_lowering) ----------

uint rotl(uint x, uint r) { return (x << r) | (x >> (32u - r)); }

void mix4(inout uint x0, inout uint x1, uvec4 r) {
  x0 += x1; x1 = rotl(x1, r.x); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r.y); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r.z); x1 ^= x0;
  x0 += x1; x1 = rotl(x1, r.w); x1 ^= x0;
}

uvec2 threefry2x32(uvec2 k, uvec2 ctr) {
  const uvec4 r0 = uvec4(13u, 15u, 26u, 6u);
  const uvec4 r1 = uvec4(17u, 29u, 16u, 24u);
  const uint k2 = k.x ^ k.y ^ 0x1BD11BDAu;
  uint x0 = ctr.x + k.x;
  uint x1 = ctr.y + k.y;
  mix4(x0, x1, r0); x0 += k.y; x1 += k2 + 1u;
  mix4(x0, x1, r1); x0 += k2;  x1 += k.x + 2u;
  mix4(x0, x1, r0); x0 += k.x; x1 += k.y + 3u;
  mix4(x0, x1, r1); x0 += k.y; x1 += k2 + 4u;
  mix4(x0, x1, r0); x0 += k2;  x1 += k.x + 5u;
  return uvec2(x0, x1);
}

// ---- 64-bit global flat index from 32-bit words ---------------------------------------------

uvec2 add64(uvec2 a, uvec2 b) {
  uint carry;
  const uint lo = uaddCarry(a.x, b.x, carry);
  return uvec2(lo, a.y + b.y + carry);
}

uvec2 mul64(uint c, uvec2 s) {
  uint hi, lo;
  umulExtended(c, s.x, hi, lo);
  return uvec2(lo, hi + c * s.y);
}

uvec2 global_index(uint local_index) {
  uvec2 g = pc.origin;
  uint rest = local_index;
  for (int d = int(pc.rank) - 1; d >= 0; --d) {
    uint c = rest;
    if (d > 0) {
      c = rest % pc.extent[d];
      rest /= pc.extent[d];
    }
    g = add64(g, mul64(c, uvec2(pc.stride_lo[d], pc.stride_hi[d])));
  }
  return g;
}

// ---- float32 math with a fixed operation order (no contraction), so every device and the
// host reference round alike ------------------------------------------------------------------

// log(1 + x) in float32 within 1 ulp: FreeBSD / musl log1pf, which XLA's erf_inv also
// evaluates through log1p (its own implementation differs by backend).
float log1p_f32(float x) {
  const float ln2_hi = 6.9313812256e-01;
  const float ln2_lo = 9.0580006145e-06;
  const float lg1 = 0.66666662693;
  const float lg2 = 0.40000972152;
  const float lg3 = 0.28498786688;
  const float lg4 = 0.24279078841;
  const uint ix = floatBitsToUint(x);
  int k = 1;
  precise float c = 0.0;
  precise float f = x;
  if (ix < 0x3ed413d0u || (ix >> 31) != 0u) {  // 1 + x < sqrt(2)
    if (ix >= 0xbf800000u) {                   // x <= -1
      return x == -1.0 ? uintBitsToFloat(0xff800000u) : uintBitsToFloat(0x7fc00000u);
    }
    if ((ix << 1) < (0x33800000u << 1)) return x;  // |x| < 2^-24
    if (ix <= 0xbe95f619u) k = 0;                  // sqrt(2)/2 <= 1 + x < sqrt(2)
  } else if (ix >= 0x7f800000u) {
    return x;
  }
  if (k != 0) {
    precise float u = 1.0 + x;
    uint iu = floatBitsToUint(u) + (0x3f800000u - 0x3f3504f3u);
    k = int(iu >> 23) - 0x7f;
    // Correction term ~ log(1 + x) - log(u).
    if (k < 25) {
      c = k >= 2 ? 1.0 - (u - x) : x - (u - 1.0);
      c /= u;
    } else {
      c = 0.0;
    }
    iu = (iu & 0x007fffffu) + 0x3f3504f3u;  // u reduced into [sqrt(2)/2, sqrt(2)]
    f = uintBitsToFloat(iu) - 1.0;
  }
  precise float s = f / (2.0 + f);
  precise float z = s * s;
  precise float w = z * z;
  precise float t1 = w * (lg2 + w * lg4);
  precise float t2 = z * (lg1 + w * lg3);
  precise float r = t2 + t1;
  precise float hfsq = 0.5 * f * f;
  precise float dk = float(k);
  precise float result = s * (hfsq + r) + (dk * ln2_lo + c) - hfsq + f + dk * ln2_hi;
  return result;
}

// erfinv as XLA's ErfInv32 (M. Giles' single-precision approximation, w through log1p).
float erfinv_f32(float x) {
  precise float w = -log1p_f32((-x) * x);
  const bool small = w < 5.0;
  precise float p;
  if (small) {
    w = w - 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  precise float result = p * x;
  if (abs(x) == 1.0) result = x * uintBitsToFloat(0x7f800000u);  // erfinv(+-1) = +-inf
  return result;
}

// jax.random.uniform: 23 random mantissa bits under exponent 0 give [1, 2); shift and scale,
// then clamp below at minval (lax.max(minval, ...)).
float uniform_f32(uint bits) {
  precise float unit = uintBitsToFloat((bits >> 9) | 0x3f800000u) - 1.0;
  precise float scaled = unit * pc.scale + pc.minval;
  return max(pc.minval, scaled);
}

void main() {
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u +
                 gl_LocalInvocationID.x;
  if (i >= pc.count) return;
  const uvec2 k = uvec2(key[0], key[1]);
  if (pc.mode == kKeyPairs || pc.mode == kCounterPairs || pc.mode == kFoldIn) {
    uvec2 ctr = uvec2(0u, pc.base + i);
    if (pc.mode == kCounterPairs) ctr = uvec2(aux[2u * (pc.base + i)], aux[2u * (pc.base + i) + 1u]);
    if (pc.mode == kFoldIn) ctr = uvec2(0u, aux[0]);
    const uvec2 pair = threefry2x32(k, ctr);
    data[2u * i] = pair.x;
    data[2u * i + 1u] = pair.y;
    return;
  }
  const uvec2 g = global_index(pc.base + i);
  const uvec2 b = threefry2x32(k, uvec2(g.y, g.x));  // counters (hi, lo)
  const uint bits = b.x ^ b.y;
  if (pc.mode == kBits) {
    data[i] = bits;
  } else if (pc.mode == kUniform) {
    data[i] = floatBitsToUint(uniform_f32(bits));
  } else {
    precise float normal = 1.41421354 * erfinv_f32(uniform_f32(bits));
    data[i] = floatBitsToUint(normal);
  }
}
