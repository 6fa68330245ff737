#version 450
// out[i] = start + step * (base + i), as float32 or int32 bits. One invocation per element.
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer Out { uint data[]; };
layout(push_constant) uniform Params {
  uint count;     // elements in this chunk
  uint base;      // global index of the chunk's first element
  uint is_float;
  uint pad;
  float fstart;
  float fstep;
  int istart;
  int istep;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
  if (i >= p.count) return;
  const uint g = p.base + i;
  data[i] = p.is_float != 0u ? floatBitsToUint(p.fstart + p.fstep * float(g))
                             : uint(p.istart + p.istep * int(g));
}
