#version 450
// Bitonic argsort, step 0: per row, keys made orderable as unsigned words and indices 0..P-1;
// padding past the row's length sorts last.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { uint x[]; };
layout(std430, binding = 1) writeonly buffer Keys { uint keys[]; };
layout(std430, binding = 2) writeonly buffer Idx { uint idx[]; };
// in_off: where this dispatch's first row starts in the window of `x` bound.
layout(push_constant) uniform Params { uint rows; uint n; uint p; uint is_float; uint in_off; } pc;

uint orderable(uint bits) {
  if (pc.is_float == 0u) return bits ^ 0x80000000u;
  // NaN (either sign) sorts after every number, as numpy puts it last.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0xfffffffeu;
  // -0.0 equals 0.0: equal keys keep their order.
  if (bits == 0x80000000u) bits = 0u;
  return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}

void main() {
  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;
  if (t >= pc.rows * pc.p) return;
  const uint r = t / pc.p, j = t % pc.p;
  keys[t] = j < pc.n ? orderable(x[pc.in_off + r * pc.n + j]) : 0xffffffffu;
  idx[t] = j;
}
