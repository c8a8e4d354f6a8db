// Small PTX wrappers for the sm_80+ tensor-core path: cp.async (16-byte, zero-filling), ldmatrix,
// mma.sync m16n8k16 with fp32 accumulation, and packing fp32 pairs into bf16x2 / f16x2. Raw PTX
// instead of cuda_bf16.h keeps NVRTC compiles fast (DESIGN.md: cold start is a feature).
#pragma once

#include "common/dtype_kinds.cuh"

namespace moejit {
namespace sm80 {

__device__ inline unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// A float from shared memory by its 32-bit address (pointers the compiler cannot see are shared
// cost 64-bit generic address registers). Volatile: kept in order with the barriers around it.
__device__ inline float lds_f32(unsigned addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}

// Copies 16 bytes global -> shared; with valid == false nothing is read and the destination is
// zero-filled (src-size 0), which is how rows past the end and K tails become zeros.
__device__ inline void cp_async_16(unsigned dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same copy cached in L1 (.ca): for data other warps of the CTA copy too (shared activations).
__device__ inline void cp_async_16_ca(unsigned dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// Copies 4 bytes global -> shared (small per-tile values without holding a register for them).
__device__ inline void cp_async_4(unsigned dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8.
__device__ inline void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d[16x8] += a[16x16] * b[16x8], fp32 accumulators.
template <int DTYPE>
__device__ inline void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (DTYPE == kDTypeBF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// d[16x8] += a[16x32] * b[32x8] on e4m3 operands, fp32 accumulators (sm_89+). The fragments hold
// the same bytes as the 16-bit m16n8k16 ones (4 bytes per register, 32 bytes per row), so the same
// ldmatrix addressing feeds both.
__device__ inline void mma_16832_e4m3(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the host refuses fp8 specs below sm_89
#endif
}

// (lo, hi) fp32 -> two e4m3 in the low 16 bits (lo in the low byte), round to nearest, saturating
// to +-448 (sm_89+).
__device__ inline unsigned short pack2_e4m3(float lo, float hi) {
  unsigned short r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
#else
  __trap();
#endif
  return r;
}

// (lo, hi) -> one 32-bit word holding two 16-bit values, lo in the low half (round to nearest).
template <int DTYPE>
__device__ inline unsigned pack2(float lo, float hi) {
  unsigned r;
  if constexpr (DTYPE == kDTypeBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// p[0] += a, p[1] += b in global memory without returning the old values (8-byte aligned p). One
// vector reduction on sm_90+, two scalar ones before.
__device__ inline void red_add_f32x2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(a) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(p + 1), "f"(b) : "memory");
#endif
}

template <int DTYPE>
__device__ inline float to_float(unsigned short bits) {
  if constexpr (DTYPE == kDTypeBF16) {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  } else {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
}

template <int DTYPE>
__device__ inline unsigned short from_float(float v) {
  unsigned short r;
  if constexpr (DTYPE == kDTypeBF16) {
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(v));
  } else {
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(v));
  }
  return r;
}

}  // namespace sm80
}  // namespace moejit
