// The decode GEMV's dot products (moe_decode_gemv.cuh): 16-bit chunks in fp32, and e4m3 weight
// codes against f16 activations.
#pragma once

#include "common/mma_sm80.cuh"

namespace moejit {
namespace moe_decode_detail {

// acc += sum of the 8 products of two chunks of DTYPE values.
template <int DTYPE>
__device__ inline float dot8(uint4 a, uint4 b, float acc) {
  const unsigned wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(sm80::to_float<DTYPE>(static_cast<unsigned short>(wa[i] & 0xffffu)),
               sm80::to_float<DTYPE>(static_cast<unsigned short>(wb[i] & 0xffffu)), acc);
    acc = fmaf(sm80::to_float<DTYPE>(static_cast<unsigned short>(wa[i] >> 16)),
               sm80::to_float<DTYPE>(static_cast<unsigned short>(wb[i] >> 16)), acc);
  }
  return acc;
}

// e4m3 products: the weights' codes convert exactly to f16 (cvt e4m3x2 -> f16x2, the one conversion
// per pair), the activations sit in shared memory as f16 already, times 2^-8 so that a product
// stays below the f16 maximum (448 * 1.75); sums per dot16_e4m3. (An early version converting both
// operands to fp32 in both kernels ran DeepSeek-V3 TP8 at ~23 us per token on an H200; gemv1's
// fp32 sums today cost nothing measurable on an H100, twenty-fourth session.)
inline constexpr float kFp8ProductScale = 256.f;  // undoes the activations' 2^-8

__device__ inline float half_to_float(unsigned bits) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(bits)));
  return f;
}

__device__ inline unsigned hmul2(unsigned a, unsigned b) {
  unsigned d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ inline unsigned hadd2(unsigned a, unsigned b) {
  unsigned d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Sum of the 16 products of e4m3 weight codes w and f16 activations x (x0: elements 0-7, x1: 8-15),
// / kFp8ProductScale. The weights' codes convert exactly (cvt e4m3x2 -> f16x2, the one conversion
// per pair) and the products are exact in f16. FP32_SUMS (gemv1): the products convert to fp32 and
// add there. Its sums are quantized to e4m3 again (the intermediate), which turned f16 pair sums'
// rounding into whole e4m3 steps of some elements: a DeepSeek-style layer (E = 32, top_k = 4, K =
// 1536, N = 128) ran 1.41e-2 from the fp64 reference at M = 1 with them, 1.54e-3 with fp32 sums
// (the swap-AB kernel's 1.54e-3), at the same speed on an H100 (DeepSeek-V3 TP8 M = 1 / 2). Else
// (gemv2, whose sums are the layer's output) pairs add in f16 first, then fp32. sm_89+.
template <bool FP32_SUMS>
__device__ inline float dot16_e4m3(uint4 w, uint4 x0, uint4 x1) {
  float acc = 0.f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const unsigned ww[4] = {w.x, w.y, w.z, w.w}, xx[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // 4 codes of w against 2 words of x
    unsigned pair[2];
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair[0]) : "h"(static_cast<unsigned short>(ww[i] & 0xffffu)));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(pair[1]) : "h"(static_cast<unsigned short>(ww[i] >> 16)));
    if constexpr (FP32_SUMS) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned x = xx[2 * i + h];
        acc = fmaf(half_to_float(pair[h] & 0xffffu), half_to_float(x & 0xffffu), acc);
        acc = fmaf(half_to_float(pair[h] >> 16), half_to_float(x >> 16), acc);
      }
    } else {
      const unsigned sum = hadd2(hmul2(pair[0], xx[2 * i]), hmul2(pair[1], xx[2 * i + 1]));
      acc += half_to_float(sum & 0xffffu) + half_to_float(sum >> 16);
    }
  }
#else
  __trap();
#endif
  return acc;
}

}  // namespace moe_decode_detail
}  // namespace moejit
