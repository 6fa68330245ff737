#version 450
// Writes the first n sorted indices of each row.
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };
// out_off: where this dispatch's first row starts in the window of `o` bound.
layout(push_constant) uniform Params { uint rows; uint n; uint p; uint out_off; } pc;

void main() {
  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;
  if (t >= pc.rows * pc.n) return;
  const uint r = t / pc.n, j = t % pc.n;
  o[pc.out_off + t] = idx[r * pc.p + j];
}
