// moe_act_quant_kernel: per-token fp8 quantization of the activations of a w8a8 GEMM.
// One warp per (row, group): the group is 128 columns (kActQuantGroup128, DeepSeek's per-token
// 128-group scaling) or the whole row (kActQuantRow); scale = max(amax, 1e-10) / 448 and
// q = e4m3(x / scale), saturating. kActQuantStatic uses the given tensor scale. Each lane reads 4
// consecutive columns (8 bytes) per step; the second pass re-reads the group from L1.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/moe_epilogue_args.cuh"
#include "moe/quant_kinds.cuh"

namespace moejit {
namespace act_quant {

// Four consecutive DTYPE values (8 bytes) as floats.
template <int DTYPE>
__device__ inline void load4(const unsigned short* p, float (&v)[4]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  v[0] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.x & 0xffffu));
  v[1] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.x >> 16));
  v[2] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.y & 0xffffu));
  v[3] = sm80::to_float<DTYPE>(static_cast<unsigned short>(w.y >> 16));
}

// A group's scale from each lane's amax over its part of the group (whole warp): max(amax, 1e-10) / 448.
__device__ inline float warp_group_scale(float amax) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  return fmaxf(amax, 1e-10f) / kFp8E4m3Max;
}

// e4m3(v / scale) of four values, element j in byte j (saturating).
__device__ inline unsigned pack4(const float (&v)[4], float scale) {
  const unsigned lo = sm80::pack2_e4m3(v[0] / scale, v[1] / scale);
  const unsigned hi = sm80::pack2_e4m3(v[2] / scale, v[3] / scale);
  return lo | (hi << 16);
}

}  // namespace act_quant

template <int DTYPE, int MODE, int THREADS>
__global__ void __launch_bounds__(THREADS) moe_act_quant_kernel(const MoeActQuantArgs args) {
  static_assert(THREADS % 32 == 0, "whole warps");
  pdl::launch_dependents();
  pdl::wait();  // may be launched under the previous kernel's tail (programmatic dependent launch)
  const int rows = args.totals ? args.totals[1] : args.num_rows;
  const int group = MODE == kActQuantGroup128 ? kQuantFp8BlockSize : args.cols;
  const int groups = (args.cols + group - 1) / group;
  const long long items = static_cast<long long>(rows) * groups;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (THREADS / 32);
  for (long long item = blockIdx.x * static_cast<long long>(THREADS / 32) + threadIdx.x / 32; item < items;
       item += warps) {
    const long long row = item / groups;
    if (args.gather_index && args.gather_index[row] < 0) continue;
    const int c0 = static_cast<int>(item % groups) * group;
    const int c1 = min(c0 + group, args.cols);
    const unsigned short* x = static_cast<const unsigned short*>(args.in) + row * args.ld_in;
    float scale;
    if constexpr (MODE == kActQuantStatic) {
      scale = *args.static_scale;
    } else {
      float amax = 0.f;
      for (int c = c0 + lane * 4; c < c1; c += 128) {
        float v[4];
        act_quant::load4<DTYPE>(x + c, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(v[j]));
      }
      scale = act_quant::warp_group_scale(amax);
      if (lane == 0) args.scale[row * args.ld_scale + c0 / group] = scale;
    }
    unsigned char* q = args.out + row * args.ld_out;
    for (int c = c0 + lane * 4; c < c1; c += 128) {
      float v[4];
      act_quant::load4<DTYPE>(x + c, v);
      *reinterpret_cast<unsigned*>(q + c) = act_quant::pack4(v, scale);
    }
  }
}

}  // namespace moejit
