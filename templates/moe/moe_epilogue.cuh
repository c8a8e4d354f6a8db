// Stand-alone MoE stages.
//  - moe_activation_kernel: the unfused mode's activation, between GEMM1 (no activation) and GEMM2;
//    the same device functions as the fused epilogue, so fused and unfused agree bit for bit.
//  - moe_reduce_kernel: out[t] = sum over slots s = 0..TOPK-1 (in that order) of rows[t*TOPK + s],
//    fp32, skipping dropped slots. Fixed order and one thread per output element make it bitwise
//    reproducible and independent of the batch.
//  - moe_reduce16_kernel: the same over DTYPE rows (fast mode, large batches: kRoleGemm2Rows16),
//    8 columns per thread.
//  - moe_cast_kernel: fp32 accumulator -> DTYPE (fast mode, after the atomic GEMM2).
//  - moe_gather_rows_kernel: X rows copied into the routing's padded-row order before GEMM1
//    (GemmTile::pregather), 16 bytes per thread, a row per CTA at a time.
// reduce and cast wait for GEMM2 on the device (common/dependent_launch.cuh): the fused layer launches
// them to overlap its tail.
// Each thread handles 4 consecutive columns (16-byte fp32 loads, 8-byte stores).
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_epilogue_args.cuh"

namespace moejit {
namespace moe_epilogue_detail {

template <int DTYPE>
__device__ inline void store4(void* base, long long index, float4 v) {
  uint2 packed;
  packed.x = sm80::pack2<DTYPE>(v.x, v.y);
  packed.y = sm80::pack2<DTYPE>(v.z, v.w);
  *reinterpret_cast<uint2*>(static_cast<unsigned short*>(base) + index) = packed;
}

// body(token, first column) for every chunk of COLS columns of the output, grid-stride.
template <int COLS, int THREADS, class Body>
__device__ inline void for_each_chunk(const MoeReduceArgs& args, const Body& body) {
  const long long chunks = args.cols / COLS;
  const long long total = static_cast<long long>(args.num_tokens) * chunks;
  for (long long i = blockIdx.x * static_cast<long long>(THREADS) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * THREADS)
    body(i / chunks, static_cast<int>(i % chunks) * COLS);
}

// add(row) for token t's routed slots in slot order, skipping dropped ones (scatter index -1).
template <int TOPK, class Add>
__device__ inline void for_each_routed_slot(const MoeReduceArgs& args, long long t, const Add& add) {
#pragma unroll
  for (int s = 0; s < TOPK; ++s) {
    const long long slot = t * TOPK + s;
    if (args.scatter_index[slot] >= 0) add(slot);
  }
}

}  // namespace moe_epilogue_detail

template <int DTYPE, int ACT, int THREADS>
__global__ void __launch_bounds__(THREADS) moe_activation_kernel(const MoeActivationArgs args) {
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool INTERLEAVED = activation_is_interleaved(ACT);
  const int rows = args.totals[1];
  const unsigned short* in = static_cast<const unsigned short*>(args.in);
  unsigned short* out = static_cast<unsigned short*>(args.out);
  const long long per_row = args.n_out / 2;  // column pairs
  const long long total = static_cast<long long>(rows) * per_row;
  for (long long i = blockIdx.x * static_cast<long long>(THREADS) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * THREADS) {
    const long long row = i / per_row;
    const int col = static_cast<int>(i % per_row) * 2;
    if (args.gather_index[row] < 0) continue;
    const unsigned short* x = in + row * args.ld_in;
    float v[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = col + j;
      if constexpr (GATED) {
        const float gate = sm80::to_float<DTYPE>(x[INTERLEAVED ? 2 * c : c]);
        const float up = sm80::to_float<DTYPE>(x[INTERLEAVED ? 2 * c + 1 : c + args.n_out]);
        v[j] = act::gated<ACT>(gate, up, args.alpha, args.limit);
      } else {
        v[j] = act::single<ACT>(sm80::to_float<DTYPE>(x[c]));
      }
    }
    *reinterpret_cast<unsigned*>(out + row * args.ld_out + col) = sm80::pack2<DTYPE>(v[0], v[1]);
  }
}

// (THREADS, 1): without the explicit minimum, ptxas capped this kernel at 32 registers for TOPK = 6
// and spilled 8 bytes (seen with NVRTC 13.0, sm_90a).
template <int DTYPE, int TOPK, int THREADS>
__global__ void __launch_bounds__(THREADS, 1) moe_reduce_kernel(const MoeReduceArgs args) {
  pdl::wait();  // may be launched under GEMM2's tail (programmatic dependent launch)
  moe_epilogue_detail::for_each_chunk<4, THREADS>(args, [&](long long t, int col) {
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    moe_epilogue_detail::for_each_routed_slot<TOPK>(args, t, [&](long long slot) {
      const float4 r = *reinterpret_cast<const float4*>(static_cast<const float*>(args.in) + slot * args.ld_in + col);
      sum.x += r.x;
      sum.y += r.y;
      sum.z += r.z;
      sum.w += r.w;
    });
    moe_epilogue_detail::store4<DTYPE>(args.out, t * args.ld_out + col, sum);
  });
}

// The fast mode's top-k sum of large batches: GEMM2 stored each routed slot's row in DTYPE
// (kRoleGemm2Rows16); out[t] = fp32 sum of the token's rows in slot order. 8 columns per thread:
// 16-byte loads.
template <int DTYPE, int TOPK, int THREADS>
__global__ void __launch_bounds__(THREADS, 1) moe_reduce16_kernel(const MoeReduceArgs args) {
  pdl::wait();
  const unsigned short* in = static_cast<const unsigned short*>(args.in);
  moe_epilogue_detail::for_each_chunk<8, THREADS>(args, [&](long long t, int col) {
    float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    moe_epilogue_detail::for_each_routed_slot<TOPK>(args, t, [&](long long slot) {
      const uint4 r = *reinterpret_cast<const uint4*>(in + slot * args.ld_in + col);
      const unsigned words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        sum[2 * w] += sm80::to_float<DTYPE>(static_cast<unsigned short>(words[w] & 0xffffu));
        sum[2 * w + 1] += sm80::to_float<DTYPE>(static_cast<unsigned short>(words[w] >> 16));
      }
    });
    // out is 8-byte aligned (the layer's contract): two 8-byte stores.
    moe_epilogue_detail::store4<DTYPE>(args.out, t * args.ld_out + col, make_float4(sum[0], sum[1], sum[2], sum[3]));
    moe_epilogue_detail::store4<DTYPE>(args.out, t * args.ld_out + col + 4, make_float4(sum[4], sum[5], sum[6], sum[7]));
  });
}

template <int DTYPE, int TOPK, int THREADS>
__global__ void __launch_bounds__(THREADS) moe_cast_kernel(const MoeReduceArgs args) {
  pdl::wait();
  moe_epilogue_detail::for_each_chunk<4, THREADS>(args, [&](long long t, int col) {
    const float4 r = *reinterpret_cast<const float4*>(static_cast<const float*>(args.in) + t * args.ld_in + col);
    moe_epilogue_detail::store4<DTYPE>(args.out, t * args.ld_out + col, r);
  });
}

// Waits for the routing (gather_index, totals); the GEMM1 after it may launch at once and set up
// under this kernel (it waits for the whole grid before reading A).
template <int DTYPE, int TOPK, int THREADS>
__global__ void __launch_bounds__(THREADS) moe_gather_rows_kernel(const MoeGatherArgs args) {
  pdl::wait();
  pdl::launch_dependents();
  const int rows = args.totals[1];
  const int chunks = static_cast<int>(args.row_bytes / 16);
  // Padding rows are left as they are: a wgmma output row depends on its own A row only, and
  // GEMM1 stores no padding row (writing them cost up to E * (block_m - 1) rows of traffic).
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int slot = args.gather_index[r];
    if (slot < 0) continue;
    const uint4* in = reinterpret_cast<const uint4*>(args.in + static_cast<long long>(slot / TOPK) * args.ld_in);
    uint4* out = reinterpret_cast<uint4*>(args.out + r * args.row_bytes);
    for (int c = threadIdx.x; c < chunks; c += THREADS) out[c] = __ldg(in + c);
  }
}

}  // namespace moejit
