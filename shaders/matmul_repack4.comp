#version 450
// Matmul operand repacking for vec4-aligned sources (stored rows, batch stride and first element
// all multiples of 4): as matmul_repack.comp, but whole vec4s at a time. Not transposed, each
// invocation copies one vec4 of a row; transposed, it transposes one 4 x 4 block, with the 8
// lanes of a SIMD row on neighbouring blocks of the same stored rows so their fetches are adjacent.
layout(local_size_x = 64) in;
layout(binding = 0) uniform usamplerBuffer src;  // RGBA32 texels
layout(std430, binding = 1) writeonly buffer Out { uvec4 o[]; };
layout(push_constant) uniform Params {
  uint count;     // invocations of this dispatch
  uint rows;      // valid rows of op(X) in this block (the rest is padding)
  uint cols;      // valid columns of op(X)
  uint out_rows;  // rows of one output block
  uint out_cols;  // columns of the output (a multiple of 4)
  uint in_first;  // first vec4 of X in the src binding
  uint in_batch;  // vec4s between batch entries of X
  uint in_ld;     // vec4s between stored rows of X
  uint trans;
  uint out_first; // first vec4 of this block in the out binding
} p;

// Components of v at or past `valid` become 0.
uvec4 keep(uvec4 v, int valid) {
  return uvec4(valid > 0 ? v.x : 0u, valid > 1 ? v.y : 0u, valid > 2 ? v.z : 0u, valid > 3 ? v.w : 0u);
}

void main() {
  const uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 64u + gl_LocalInvocationID.x;
  if (i >= p.count) return;
  const uint c4s = p.out_cols / 4u;
  if (p.trans == 0u) {
    const uint c4 = i % c4s;
    const uint rest = i / c4s;
    const uint r = rest % p.out_rows;
    const uint b = rest / p.out_rows;
    uvec4 v = uvec4(0u);
    if (r < p.rows && c4 * 4u < p.cols)
      v = keep(texelFetch(src, int(p.in_first + b * p.in_batch + r * p.in_ld + c4)), int(p.cols - c4 * 4u));
    o[p.out_first + (b * p.out_rows + r) * c4s + c4] = v;
    return;
  }
  // op(X)[r][c] = X[c][r]: block rows r4*4.., columns c4*4..; X's rows c4*4 + j hold them.
  const uint r4s = (p.out_rows + 3u) / 4u;
  const uint r4 = i % r4s;
  const uint rest = i / r4s;
  const uint c4 = rest % c4s;
  const uint b = rest / c4s;
  uvec4 x[4];
  for (int j = 0; j < 4; ++j) {
    const uint c = c4 * 4u + uint(j);
    x[j] = uvec4(0u);
    if (c < p.cols && r4 * 4u < p.rows)
      x[j] = keep(texelFetch(src, int(p.in_first + b * p.in_batch + c * p.in_ld + r4)), int(p.rows - r4 * 4u));
  }
  for (int k = 0; k < 4; ++k) {
    const uint r = r4 * 4u + uint(k);
    if (r < p.out_rows) o[p.out_first + (b * p.out_rows + r) * c4s + c4] = uvec4(x[0][k], x[1][k], x[2][k], x[3][k]);
  }
}
