// moe_act_quant_kernel: per-token fp8 quantization of the activations of a w8a8 GEMM.
// kActQuantGroup128 (DeepSeek's per-token 128-group scaling): a half-warp per (row, group), each
// lane 8 consecutive columns (one 16-byte load), two groups per half-warp and step with all loads
// issued first; the values stay in registers between the amax and the conversion. kActQuantRow: a
// warp per row, the second pass re-reading the row (L1). kActQuantStatic: the given tensor scale.
// scale = max(amax, 1e-10) / 448 and q = e4m3(x * (1 / scale)), saturating, the reciprocal rounded
// once (the CPU reference's rule, fp8_quantize_dequantize_row). It was x / scale: an IEEE division
// per element, which made the decode GEMV's per-CTA quantization of x compute-bound (every CTA of
// the grid quantizes all of it; fp8_block DeepSeek-V3 TP8 M = 2 spent 7 us there, H100 stamps).
// Rows are 16-byte aligned and cols a multiple of 16 (MoeSpec: fp8 layers' K and N), so every
// lane's 8 columns are whole.
// Measured (ncu, H100, DeepSeek-V3 TP8 fp8_block M = 8192): the former warp-per-group form (8-byte
// loads, two passes over the group, 64-bit item arithmetic) took 117 us for X (117 MB in, 59 MB
// out) and 45 us for the intermediate; this form 69 and 27.5 us.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/moe_epilogue_args.cuh"
#include "moe/quant_kinds.cuh"

namespace moejit {
namespace act_quant {

// Four consecutive DTYPE values (8 bytes) as floats (the decode GEMV's quantize_rows).
template <int DTYPE>
__device__ inline void load4(const unsigned short* p, float (&v)[4]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  v[0] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.x & 0xffffu));
  v[1] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.x >> 16));
  v[2] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.y & 0xffffu));
  v[3] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.y >> 16));
}

// Eight consecutive DTYPE values (16 bytes) as floats.
template <int DTYPE>
__device__ inline void load8(const unsigned short* p, float (&v)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = sm80::to_float<DTYPE>(static_cast<unsigned short>(words[i] & 0xffffu));
    v[2 * i + 1] = sm80::to_float<DTYPE>(static_cast<unsigned short>(words[i] >> 16));
  }
}

__device__ inline float amax8(const float (&v)[8]) {
  float a = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(v[j]));
  return a;
}

// The scale of a group whose lanes xor-reachable below WIDTH hold the parts' amax (every lane of
// the warp calls it): max(amax, 1e-10) / 448.
template <int WIDTH>
__device__ inline float group_scale(float amax) {
#pragma unroll
  for (int off = WIDTH / 2; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  return fmaxf(amax, 1e-10f) / kFp8E4m3Max;
}

// 1 / scale, rounded once (IEEE): the factor pack4 / store8 take.
__device__ inline float inverse(float scale) { return __frcp_rn(scale); }

// e4m3(v * inv) of four values (inv = inverse(scale)), element j in byte j (saturating).
__device__ inline unsigned pack4(const float (&v)[4], float inv) {
  const unsigned lo = sm80::pack2_e4m3(v[0] * inv, v[1] * inv);
  const unsigned hi = sm80::pack2_e4m3(v[2] * inv, v[3] * inv);
  return lo | (hi << 16);
}

// e4m3(v * inv) of eight values, element j in byte j (saturating), stored as 8 bytes.
__device__ inline void store8(unsigned char* q, const float (&v)[8], float inv) {
  unsigned w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    w[i] = pack4({v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]}, inv);
  }
  *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
}

}  // namespace act_quant

template <int DTYPE, int MODE, int THREADS>
__global__ void __launch_bounds__(THREADS) moe_act_quant_kernel(const MoeActQuantArgs args) {
  static_assert(THREADS % 32 == 0, "whole warps");
  pdl::launch_dependents();
  pdl::wait();  // may be launched under the previous kernel's tail (programmatic dependent launch)
  const int rows = args.totals ? args.totals[1] : args.num_rows;
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (THREADS / 32) + threadIdx.x / 32, warps = gridDim.x * (THREADS / 32);
  const unsigned short* in = static_cast<const unsigned short*>(args.in);
  if constexpr (MODE == kActQuantGroup128) {
    // Unit u = (row u / groups, group u % groups); warp w takes units w * 4 .. w * 4 + 3 (half-warp
    // h the two from w * 4 + 2 h), then those a grid's worth further on (the host keeps units < 2^30).
    // The loop runs on the warp's first unit, so both halves stay in it for the shuffles.
    constexpr int PER_HALF = kActQuantGroupsPerWarp / 2;
    const int groups = (args.cols + kQuantFp8BlockSize - 1) / kQuantFp8BlockSize;
    const int units = rows * groups, hl = lane & 15;
    for (int w0 = warp * kActQuantGroupsPerWarp; w0 < units; w0 += warps * kActQuantGroupsPerWarp) {
      const int u0 = w0 + (lane >> 4) * PER_HALF;
      float v[PER_HALF][8];
      int row[PER_HALF], col[PER_HALF];
      bool live[PER_HALF];
#pragma unroll
      for (int j = 0; j < PER_HALF; ++j) {
        const int u = u0 + j;
        row[j] = u / groups;
        col[j] = (u - row[j] * groups) * kQuantFp8BlockSize + hl * 8;
        live[j] = u < units && col[j] < args.cols && (!args.gather_index || args.gather_index[row[j]] >= 0);
        if (live[j]) act_quant::load8<DTYPE>(in + row[j] * args.ld_in + col[j], v[j]);
        else
#pragma unroll
          for (int e = 0; e < 8; ++e) v[j][e] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < PER_HALF; ++j) {
        const float scale = act_quant::group_scale<16>(act_quant::amax8(v[j]));
        if (!live[j]) continue;
        if (hl == 0) args.scale[row[j] * args.ld_scale + col[j] / kQuantFp8BlockSize] = scale;
        act_quant::store8(args.out + row[j] * args.ld_out + col[j], v[j], act_quant::inverse(scale));
      }
    }
  } else {
    for (int row = warp; row < rows; row += warps) {
      if (args.gather_index && args.gather_index[row] < 0) continue;
      const unsigned short* x = in + row * args.ld_in;
      float scale;
      if constexpr (MODE == kActQuantStatic) {
        scale = *args.static_scale;
      } else {
        float amax = 0.f;
        for (int c = lane * 8; c < args.cols; c += 256) {
          float v[8];
          act_quant::load8<DTYPE>(x + c, v);
          amax = fmaxf(amax, act_quant::amax8(v));
        }
        scale = act_quant::group_scale<32>(amax);
        if (lane == 0) args.scale[row * args.ld_scale] = scale;
      }
      const float inv = act_quant::inverse(scale);
      for (int c = lane * 8; c < args.cols; c += 256) {
        float v[8];
        act_quant::load8<DTYPE>(x + c, v);
        act_quant::store8(args.out + row * args.ld_out + c, v, inv);
      }
    }
  }
}

}  // namespace moejit
