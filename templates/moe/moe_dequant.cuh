// Dequantization of stored weight formats (quant_kinds.cuh) into 16-bit DTYPE pairs, 8 elements (one
// 16-byte shared-memory chunk) at a time, and the decoding of their scales. Arithmetic instead of
// lookup tables: a per-thread table would live in local memory.
#pragma once

#include "common/mma_sm80.cuh"
#include "moe/quant_kinds.cuh"

namespace moejit {
namespace dequant {

// OCP e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; 0, 0.5 (subnormal), 1, 1.5, ..., 6.
__device__ inline float e2m1_to_float(unsigned v) {
  const unsigned e = (v >> 1) & 3u, m = v & 1u;
  const unsigned magnitude = e == 0 ? (m ? 0x3f000000u : 0u) : (((e + 126u) << 23) | (m << 22));
  return __uint_as_float(magnitude | ((v & 8u) << 28));
}

// OCP e8m0: 2^(s - 127); s = 0 is 2^-127 (an fp32 subnormal), s = 255 is NaN.
__device__ inline float e8m0_to_float(unsigned s) {
  return s == 0 ? __uint_as_float(0x00400000u) : s == 255 ? __uint_as_float(0x7fc00000u) : __uint_as_float(s << 23);
}

// Eight consecutive weights (k ascending) from `raw` (shared memory: 8 bytes for int8, 4 bytes for
// the 4-bit formats) -> four DTYPE pairs. int8: the per-row scale is applied in the epilogue (exact
// here: |q| <= 128 fits 16-bit floats); int4: (q - zero) * scale; mxfp4: e2m1 * scale.
template <int QUANT, int DTYPE>
__device__ inline uint4 dequant8(const unsigned char* raw, float scale, float zero) {
  float v[8];
  if constexpr (QUANT == kQuantInt8Channel) {
    const uint2 w = *reinterpret_cast<const uint2*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned word = j < 4 ? w.x : w.y;
      v[j] = static_cast<float>(static_cast<signed char>((word >> (8 * (j & 3))) & 0xffu));
    }
  } else {
    const unsigned w = *reinterpret_cast<const unsigned*>(raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned q = (w >> (4 * j)) & 0xfu;
      if constexpr (QUANT == kQuantInt4Group) v[j] = (static_cast<float>(q) - zero) * scale;
      else v[j] = e2m1_to_float(q) * scale;
    }
  }
  return make_uint4(sm80::pack2<DTYPE>(v[0], v[1]), sm80::pack2<DTYPE>(v[2], v[3]), sm80::pack2<DTYPE>(v[4], v[5]),
                    sm80::pack2<DTYPE>(v[6], v[7]));
}

}  // namespace dequant
}  // namespace moejit
