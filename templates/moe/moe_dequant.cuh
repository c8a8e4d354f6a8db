// Dequantization of stored weight formats (quant_kinds.cuh) into 16-bit DTYPE pairs, 8 elements (one
// 16-byte shared-memory chunk) at a time, and the decoding of their scales. Arithmetic instead of
// lookup tables: a per-thread table would live in local memory.
#pragma once

#include "common/mma_sm80.cuh"
#include "moe/mxfp4_packed.cuh"
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

__device__ inline unsigned prmt(unsigned a, unsigned b, unsigned selector) {
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// a * b + c on two 16-bit lanes (sm_80+: fma is the one bf16x2 arithmetic sm_80 has).
template <int DTYPE>
__device__ inline unsigned fma2(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  if constexpr (DTYPE == kDTypeBF16) asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The 4-bit codes of pair p (elements 2p, 2p + 1) of a 32-bit word w (element j at bits 4j), at bits
// 0-3 and 16-19 (bits 4-7 and 20-23 hold a neighbour and are masked by the caller). lo = w, hi = w >> 4.
__device__ inline unsigned nibble_pair(unsigned lo, unsigned hi, int p) {
  return prmt(lo, hi, 0x4400u + 0x1111u * static_cast<unsigned>(p));
}

// Eight consecutive weights (k ascending) as stored (4-bit formats: the word `lo`, element j at
// bits 4j; int8: `lo` then `hi`, element j at byte j) -> four DTYPE pairs. int8: the per-row scale is applied in the epilogue (exact
// here: |q| <= 128 fits 16-bit floats); int4: (q - zero) * scale; mxfp4: e2m1 * scale.
// The 4-bit formats and int8 build both lanes of a pair with integer ops and 16-bit fmas (~2-4
// instructions per element instead of ~10 through fp32): dequantization, not memory, bounds decode
// otherwise.
template <int QUANT, int DTYPE>
__device__ inline uint4 dequant8(unsigned lo, unsigned hi, float scale, float zero) {
  unsigned out[4];
  if constexpr (QUANT == kQuantInt4Group) {
    // (magic | q) is base + q exactly (bf16: 128 + q, f16: 1024 + q); minus (base + zero) is exact
    // (small integers); one rounding in the product with the DTYPE scale.
    const unsigned w = lo;
    constexpr unsigned kMagic = DTYPE == kDTypeBF16 ? 0x43004300u : 0x64006400u;
    constexpr float kBase = DTYPE == kDTypeBF16 ? 128.f : 1024.f;
    const unsigned offset = sm80::pack2<DTYPE>(-(kBase + zero), -(kBase + zero));
    const unsigned one = sm80::pack2<DTYPE>(1.f, 1.f), scale2 = sm80::pack2<DTYPE>(scale, scale);
    const unsigned hi = w >> 4;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const unsigned v = (nibble_pair(w, hi, p) & 0x000f000fu) | kMagic;
      out[p] = fma2<DTYPE>(fma2<DTYPE>(v, one, offset), scale2, 0x80008000u);
    }
  } else if constexpr (quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16) {
    // e2m1 s.e1e0.m -> bf16 with exponent bits e1e0 and mantissa bit m: the value times 2^-126
    // (e = 0 lands on the bf16 subnormal 2^-127 = 0.5 * 2^-126); then x 2^126 and x the e8m0 scale,
    // both exact (powers of two) unless the weight itself leaves the bf16 range.
    const unsigned w = lo;
    const unsigned unbias = 0x7e807e80u;  // 2^126 in both lanes
    const unsigned scale2 = sm80::pack2<DTYPE>(scale, scale);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      unsigned v;  // pair p at the bf16 bits (value x 2^-126)
      if constexpr (QUANT == kQuantMxfp4Packed) {
        v = mxfp4_packed_pair(w, p);
      } else {
        const unsigned t = nibble_pair(w, w >> 4, p);
        v = ((t << 6) & 0x01c001c0u) | ((t << 12) & 0x80008000u);
      }
      out[p] = fma2<DTYPE>(fma2<DTYPE>(v, unbias, 0x80008000u), scale2, 0x80008000u);
    }
  } else if constexpr (QUANT == kQuantInt8Channel) {
    // One byte permute puts pair p's two bytes under a magic high byte; 16-bit integer-float
    // arithmetic then gives q exactly. The fp32 way (I2F per element, F2F per pair) runs on the
    // conversion pipe at 1/8 of the FMA rate: about what DRAM delivers to an SM in int8 bytes, so
    // it bounded every int8 kernel. Bit-identical results (q is an integer |q| <= 128).
    //  f16: 0x64 : (q ^ 0x80) is 1024 + 128 + q, minus 1152 (0x6480).
    //  bf16 (7 mantissa bits hold 0..127 only): lane = 0x43 : q; A = lane & 0xff7f = 128 + (q & 0x7f)
    //  and B = 0x4300 | (lane & 0x80) = 128 or 256 by q's sign bit; q = A - B.
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const unsigned w = p < 2 ? lo : hi, selector = p % 2 ? 0x4342u : 0x4140u;  // bytes 2p', magic, 2p' + 1, magic
      if constexpr (DTYPE == kDTypeBF16) {
        const unsigned lane = prmt(w, 0x43434343u, selector);
        out[p] = fma2<DTYPE>((lane & 0x00800080u) | 0x43004300u, 0xbf80bf80u, lane & 0xff7fff7fu);  // A - B
      } else {
        // (The sign flip after the permute, per pair: flipping the words first held them across the
        // loop, and 88-register producers of f16 GEMM1 tiles spilled 8 bytes.)
        unsigned d;
        asm("sub.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(prmt(w, 0x64646464u, selector) ^ 0x00800080u), "r"(0x64806480u));
        out[p] = d;
      }
    }
    (void)scale, (void)zero;
  } else {  // mxfp4 into f16 (rare): through fp32, the f16 range cannot take the 2^-126 trick
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      v[j] = e2m1_to_float(QUANT == kQuantMxfp4Packed ? mxfp4_packed_code(lo, j) : (lo >> (4 * j)) & 0xfu) * scale;
#pragma unroll
    for (int p = 0; p < 4; ++p) out[p] = sm80::pack2<DTYPE>(v[2 * p], v[2 * p + 1]);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// MXFP4 into bf16 with the e8m0 scale folded into one multiply. The e2m1 bits placed at the bf16
// exponent's low bits read as value * 2^-126 (see dequant8), so one multiply by 2^126 * scale =
// 2^(s - 1) gives value * scale exactly. 2^(s - 1) is a normal bf16 while s <= 128 (scale <= 2):
// its bits are (s + 126) << 7 in both lanes. Larger scales (and the NaN scale 255) take dequant8.
__device__ inline bool mxfp4_bf16_factor_fits(unsigned s) { return s <= 128u; }
__device__ inline unsigned mxfp4_bf16_factor(unsigned s) { return (s + 126u) * 0x00800080u; }

// Checkpoint order, per pair: one byte permute puts the two codes, clean, at bits 0-3 and 16-19
// (the even and odd nibbles split into bytes once per word; a sign-replicated byte of `even` is 0);
// one integer multiply by 0x1040 adds the copies shifted by 6 (magnitude to bits 6-8) and by 12
// (sign to bit 15), which cannot carry into each other; one mask; one multiply. ~4.75 instructions
// per pair, two of them on the FMA pipe: decode is bound by these instructions, not by memory.
// Prepacked (kQuantMxfp4Packed, mxfp4_packed.cuh): 1-3 integer instructions and the multiply.
template <int QUANT>
__device__ inline uint4 mxfp4x8_bf16_scaled(unsigned w, unsigned factor2) {
  unsigned out[4];
  if constexpr (QUANT == kQuantMxfp4Packed) {
#pragma unroll
    for (int p = 0; p < 4; ++p) out[p] = fma2<kDTypeBF16>(mxfp4_packed_pair(w, p), factor2, 0x80008000u);
  } else {
    const unsigned even = w & 0x0f0f0f0fu, odd = (w >> 4) & 0x0f0f0f0fu;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const unsigned t = prmt(even, odd, 0x8480u + 0x1111u * static_cast<unsigned>(p));  // bytes: e[p], 0, o[p], 0
      const unsigned v = (t * 0x1040u) & 0x81c081c0u;
      out[p] = fma2<kDTypeBF16>(v, factor2, 0x80008000u);
    }
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace dequant
}  // namespace moejit
