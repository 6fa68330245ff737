#version 450
// One compare-exchange step (k, j) of a bitonic sort on (key, index) pairs: sorting by the pair
// makes equal keys keep their original order (a stable sort).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Keys { uint keys[]; };
layout(std430, binding = 1) buffer Idx { uint idx[]; };
layout(push_constant) uniform Params { uint rows; uint p; uint k; uint j; } pc;

void main() {
  const uint t = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;
  if (t >= pc.rows * pc.p) return;
  const uint r = t / pc.p, i = t % pc.p;
  const uint l = i ^ pc.j;
  if (l <= i) return;
  const uint a = r * pc.p + i, b = r * pc.p + l;
  const bool a_first = keys[a] < keys[b] || (keys[a] == keys[b] && idx[a] < idx[b]);
  const bool ascending = (i & pc.k) == 0u;
  if (a_first != ascending) {
    const uint tk = keys[a]; keys[a] = keys[b]; keys[b] = tk;
    const uint ti = idx[a]; idx[a] = idx[b]; idx[b] = ti;
  }
}
