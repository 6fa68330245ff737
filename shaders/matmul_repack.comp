#version 450
// Matmul operand repacking: copies op(X), `rows` x `cols` (X stored transposed when `trans`),
// into a dense, zero-padded [batch][out_rows][out_cols] block, so that the blocked matmul kernel
// reads whole, aligned vec4 rows. 32-bit words are moved as they are (float32 and int32 alike).
// Any source layout; each invocation writes one vec4 of the output (4 elements of a row), so
// the index arithmetic (integer division is slow on lavapipe) is shared by 4 elements.
// matmul_repack4.comp is the faster variant for vec4-aligned sources.
layout(local_size_x = 64) in;
layout(binding = 0) uniform usamplerBuffer src;  // R32 texels
layout(std430, binding = 1) writeonly buffer Out { uvec4 o[]; };
layout(push_constant) uniform Params {
  uint count;     // invocations (output vec4s) of this dispatch
  uint rows;      // valid rows of op(X) in this block (the rest is padding)
  uint cols;      // valid columns of op(X)
  uint out_rows;  // rows of one output block
  uint out_cols;  // columns of the output (a multiple of 4)
  uint in_first;  // first element of X in the src binding
  uint in_batch;  // elements between batch entries of X
  uint in_ld;     // elements between stored rows of X
  uint trans;
  uint out_first; // first vec4 of this block in the out binding
} p;

void main() {
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;
  if (i >= p.count) return;
  const uint c4s = p.out_cols / 4u;
  const uint c4 = i % c4s;
  const uint rest = i / c4s;
  const uint r = rest % p.out_rows;
  const uint b = rest / p.out_rows;
  uvec4 v = uvec4(0u);
  if (r < p.rows) {
    const uint base = p.in_first + b * p.in_batch;
    for (int t = 0; t < 4; ++t) {
      const uint c = c4 * 4u + uint(t);
      if (c < p.cols) v[t] = texelFetch(src, int(base + (p.trans != 0u ? c * p.in_ld + r : r * p.in_ld + c))).x;
    }
  }
  o[p.out_first + i] = v;
}
