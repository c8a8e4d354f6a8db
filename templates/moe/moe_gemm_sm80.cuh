// moe_gemm, portable tensor-core path (sm_80+): a grouped GEMM over the routing tile map.
// CTA (blockIdx.x, blockIdx.y) computes output columns [x * BLOCK_N, +BLOCK_N) of tile y, i.e. the
// BLOCK_M padded rows [y * BLOCK_M, +BLOCK_M) that all belong to expert tile_expert[y]. Tiles past
// the device-side count (totals[2]) exit at once, so the grid is sized from the host's bound and no
// host synchronization is needed.
//
// Main loop: a STAGES-deep cp.async ring (16-byte copies, zero-filled past the ends: K tails, rows
// past N, padding rows), ldmatrix from an XOR-swizzled layout (conflict-free), mma.sync m16n8k16
// with fp32 accumulators. Each element's sum runs over k in the same order (16 at a time, ascending)
// whatever the tile shape, so a row's result does not depend on BLOCK_M/N/K or on its neighbours:
// the deterministic mode relies on this.
//
// Gated activations: the B tile holds BLOCK_N gate rows then BLOCK_N up rows of W1, and each warp
// accumulates both for the same output columns, so the epilogue pairs them in registers.
#pragma once

#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_gemm_args.cuh"

namespace moejit {
namespace moe_gemm_detail {

// 16-byte chunk c of smem row r lives at chunk swizzle(r, c): the 8 rows one ldmatrix phase reads
// land in 8 different bank groups.
template <int BLOCK_K>
__device__ inline int swizzle(int r, int c) {
  if constexpr (BLOCK_K == 64) return c ^ (r & 7);   // 8 chunks per 128-byte row
  else return c ^ ((r >> 1) & 3);                    // 4 chunks per 64-byte row: 2 rows per line
}

}  // namespace moe_gemm_detail

template <int ROLE, int DTYPE, int ACT, int BLOCK_M, int BLOCK_N, int BLOCK_K, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32, 1) moe_gemm_kernel(const MoeGemmArgs args) {
  using namespace moe_gemm_detail;
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool INTERLEAVED = activation_is_interleaved(ACT);
  constexpr int G = GATED ? 2 : 1;                    // accumulator sets: gate (+ up)
  constexpr int THREADS = WARPS_M * WARPS_N * 32;
  constexpr int WM = BLOCK_M / WARPS_M;               // warp tile rows
  constexpr int WN = BLOCK_N / WARPS_N;               // warp tile output columns
  constexpr int MI = WM / 16;                         // m16 fragments per warp
  constexpr int NI = WN / 8;                          // n8 fragments per warp (per set)
  constexpr int B_ROWS = G * BLOCK_N;
  constexpr int CHUNKS = BLOCK_K / 8;                 // 16-byte chunks per smem row
  constexpr int A_STAGE = BLOCK_M * BLOCK_K;          // elements per ring slot
  constexpr int B_STAGE = B_ROWS * BLOCK_K;
  static_assert(ROLE == kRoleGemm1 || ACT == kActNone, "GEMM2 has no activation");
  static_assert(BLOCK_K == 32 || BLOCK_K == 64, "BLOCK_K must be 32 or 64");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(STAGES >= 2, "the ring needs two slots at least");

  const int tile = blockIdx.y;
  if (tile >= args.totals[2]) return;
  const int n0 = blockIdx.x * BLOCK_N;
  const int expert = args.tile_expert[tile];
  const int row0 = tile * BLOCK_M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned short* s_a = reinterpret_cast<unsigned short*>(smem_raw);  // [STAGES][BLOCK_M][BLOCK_K]
  unsigned short* s_b = s_a + STAGES * A_STAGE;                       // [STAGES][B_ROWS][BLOCK_K]
  __shared__ int s_slot[BLOCK_M];     // token * top_k + slot, -1 = padding row
  __shared__ int s_arow[BLOCK_M];     // row of A to read, -1 = zeros
  __shared__ float s_weight[BLOCK_M];
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) == moe_gemm_static_smem_bytes(BLOCK_M),
                "the host sizes shared memory with moe_gemm_static_smem_bytes");

  for (int i = tid; i < BLOCK_M; i += THREADS) {
    const int g = args.gather_index[row0 + i];
    s_slot[i] = g;
    s_arow[i] = g < 0 ? -1 : (ROLE == kRoleGemm1 ? g / args.top_k : row0 + i);
    s_weight[i] = (g >= 0 && args.topk_weights != nullptr) ? args.topk_weights[g] : 0.f;
  }
  __syncthreads();

  const unsigned short* a_base = static_cast<const unsigned short*>(args.a);
  const unsigned short* b_base = static_cast<const unsigned short*>(args.b) + expert * args.b_expert_stride;
  const int k_tiles = (args.inner + BLOCK_K - 1) / BLOCK_K;

  auto load_stage = [&](int slot, int kt) {
    const int k0 = kt * BLOCK_K;
    unsigned short* sa = s_a + slot * A_STAGE;
    unsigned short* sb = s_b + slot * B_STAGE;
#pragma unroll
    for (int i = tid; i < BLOCK_M * CHUNKS; i += THREADS) {
      const int r = i / CHUNKS, c = i % CHUNKS, k = k0 + c * 8;
      const int arow = s_arow[r];
      const bool valid = arow >= 0 && k < args.inner;
      const unsigned short* src = valid ? a_base + arow * args.lda + k : a_base;
      sm80::cp_async_16(sm80::smem_addr(sa + r * BLOCK_K + swizzle<BLOCK_K>(r, c) * 8), src, valid);
    }
#pragma unroll
    for (int i = tid; i < B_ROWS * CHUNKS; i += THREADS) {
      const int r = i / CHUNKS, c = i % CHUNKS, k = k0 + c * 8;
      const int half = GATED ? r / BLOCK_N : 0;       // 0 = gate, 1 = up
      const int col = n0 + (GATED ? r % BLOCK_N : r);  // output column this smem row feeds
      const int wrow = !GATED ? col : (INTERLEAVED ? 2 * col + half : col + half * args.up_row_offset);
      const bool valid = col < args.n_out && k < args.inner;
      const unsigned short* src = valid ? b_base + wrow * args.ldb + k : b_base;
      sm80::cp_async_16(sm80::smem_addr(sb + r * BLOCK_K + swizzle<BLOCK_K>(r, c) * 8), src, valid);
    }
  };

  float acc[G][MI][NI][4];  // per set: [MI x 16 rows] x [NI x 8 columns], mma C fragments
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[g][mi][ni][e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    sm80::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    sm80::cp_async_wait<STAGES - 2>();
    __syncthreads();  // slot kt ready for all; slot kt-1 no longer read by anyone
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_stage(next % STAGES, next);
    sm80::cp_async_commit();

    const unsigned short* sa = s_a + (kt % STAGES) * A_STAGE;
    const unsigned short* sb = s_b + (kt % STAGES) * B_STAGE;
#pragma unroll
    for (int ks = 0; ks < BLOCK_K / 16; ++ks) {
      unsigned af[MI][4];  // A fragments: 16 rows x 16 k each
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = wm * WM + mi * 16 + (lane & 15);
        const int c = ks * 2 + (lane >> 4);
        sm80::ldmatrix_x4(af[mi], sm80::smem_addr(sa + r * BLOCK_K + swizzle<BLOCK_K>(r, c) * 8));
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          unsigned bf[4];  // B fragments: 16 columns x 16 k (two n8 fragments)
          const int r = g * BLOCK_N + wn * WN + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int c = ks * 2 + ((lane >> 3) & 1);
          sm80::ldmatrix_x4(bf, sm80::smem_addr(sb + r * BLOCK_K + swizzle<BLOCK_K>(r, c) * 8));
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            sm80::mma_16816<DTYPE>(acc[g][mi][2 * nj], af[mi], bf[0], bf[1]);
            sm80::mma_16816<DTYPE>(acc[g][mi][2 * nj + 1], af[mi], bf[2], bf[3]);
          }
        }
      }
    }
  }
  sm80::cp_async_wait<0>();

  // Epilogue straight from the C fragments: lane holds rows lane/4 (+8), columns 2*(lane%4) (+1).
  const float* bias = args.bias ? args.bias + expert * args.bias_expert_stride : nullptr;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = wm * WM + mi * 16 + (lane >> 2) + h * 8;
      const int g = s_slot[rl];
      if (g < 0) continue;
      const float w = s_weight[rl];
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + wn * WN + ni * 8 + (lane & 3) * 2;
        if (col >= args.n_out) continue;  // n_out is even: col + 1 is in range too
        float v[2] = {acc[0][mi][ni][2 * h], acc[0][mi][ni][2 * h + 1]};
        if constexpr (ROLE == kRoleGemm1) {
          float out[2];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (args.weight_on_input) v[j] *= w;
            if constexpr (GATED) {
              float u = acc[G - 1][mi][ni][2 * h + j];
              if (args.weight_on_input) u *= w;
              if (bias) {
                const int c = col + j;
                v[j] += bias[INTERLEAVED ? 2 * c : c];
                u += bias[INTERLEAVED ? 2 * c + 1 : c + args.up_row_offset];
              }
              out[j] = act::gated<ACT>(v[j], u, args.alpha, args.limit);
            } else {
              if (bias) v[j] += bias[col + j];
              out[j] = act::single<ACT>(v[j]);
            }
          }
          unsigned short* c_row = static_cast<unsigned short*>(args.c) + (row0 + rl) * args.ldc;
          *reinterpret_cast<unsigned*>(c_row + col) = sm80::pack2<DTYPE>(out[0], out[1]);
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (bias) v[j] += bias[col + j];
            if (args.weight_on_output) v[j] *= w;
          }
          float* c = static_cast<float*>(args.c);
          if constexpr (ROLE == kRoleGemm2Rows) {
            *reinterpret_cast<float2*>(c + g * args.ldc + col) = make_float2(v[0], v[1]);
          } else {
            sm80::red_add_f32x2(c + (g / args.top_k) * args.ldc + col, v[0], v[1]);
          }
        }
      }
    }
  }
}

}  // namespace moejit
