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
//
// Quantized weights (QUANT, quant_kinds.cuh):
//  - weight-only (int8, int4, mxfp4): the ring holds B as stored; after each slot lands, the CTA
//    dequantizes it into one DTYPE tile (swizzled as above) and the DTYPE mma reads that.
//  - w8a8 e4m3: A (pre-quantized activations) and B are bytes; a smem row holds BLOCK_K bytes and
//    mma m16n8k32 consumes the same fragments as m16n8k16 (32 bytes per row step). 128x128 block
//    scales: BLOCK_K = 128, each k tile is one scale block, accumulated apart and then added times
//    a_scale[row][kb] * b_scale[row block][kb]. Per-channel / per-tensor: one scale pair per output
//    element, in the epilogue.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_dequant.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_gemm_store.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace moe_gemm_detail {

// 16-byte chunk c of smem row r lives at chunk swizzle(r, c): the 8 rows one ldmatrix phase reads
// land in 8 different bank groups.
template <int ROW_UNITS>  // 16-bit units per smem row
__device__ inline int swizzle(int r, int c) {
  if constexpr (ROW_UNITS >= 64) return c ^ (r & 7);  // 8+ chunks per row: chunk mod 8 picks the bank group
  else return c ^ ((r >> 1) & 3);                     // 4 chunks per 64-byte row: 2 rows per line
}

// Zeroes a set of mma C fragments [sets][m16 fragments][n8 fragments][4].
template <int S, int M, int N>
__device__ inline void zero_fragments(float (&f)[S][M][N][4]) {
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) f[s][m][n][e] = 0.f;
}

// Split-K GEMM1, one pass over this lane's valid outputs: park this split's raw sums by routed slot
// (SUM = false), or add every split's sums in split order into acc (SUM = true).
template <bool SUM, int G, int MI, int NI, int WM, int WN>
__device__ inline void split_k_pass(const MoeGemmArgs& args, float (&acc)[G][MI][NI][4], const int* s_slot, int n0,
                                    int wm, int wn, int lane) {
  const long long row_floats = static_cast<long long>(G) * args.n_out;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int g = s_slot[wm * WM + mi * 16 + (lane >> 2) + h * 8];
      if (g < 0) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = n0 + wn * WN + ni * 8 + (lane & 3) * 2;
        if (col >= args.n_out) continue;
#pragma unroll
        for (int s = 0; s < G; ++s) {
          const long long at = g * row_floats + s * args.n_out + col;
          float* e = &acc[s][mi][ni][2 * h];
          if constexpr (SUM) {
            float2 sum = make_float2(0.f, 0.f);
            for (int z = 0; z < static_cast<int>(gridDim.z); ++z) {
              const float2 p = __ldcg(reinterpret_cast<const float2*>(args.split_partial + z * args.split_stride + at));
              sum.x += p.x;
              sum.y += p.y;
            }
            e[0] = sum.x;
            e[1] = sum.y;
          } else {
            *reinterpret_cast<float2*>(args.split_partial + blockIdx.z * args.split_stride + at) = make_float2(e[0], e[1]);
          }
        }
      }
    }
}

// Split-K GEMM1 (gridDim.z > 1): parks this split's sums, then the last split to arrive at the tile
// adds all splits' sums in split order into acc (the same answer whichever arrives last) and returns
// true to run the epilogue; the others return false and exit. Threadfence pattern: partials stored,
// fence, barrier, one atomic per CTA; the last CTA reads the others' partials from L2 (__ldcg).
template <int G, int MI, int NI, int WM, int WN>
__device__ inline bool split_k_finish(const MoeGemmArgs& args, float (&acc)[G][MI][NI][4], const int* s_slot, int tile,
                                      int n0, int wm, int wn, int lane) {
  __shared__ int s_last;
  split_k_pass<false, G, MI, NI, WM, WN>(args, acc, s_slot, n0, wm, wn, lane);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    s_last = atomicAdd(args.split_counters + tile * gridDim.x + blockIdx.x, 1) == static_cast<int>(gridDim.z) - 1;
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  split_k_pass<true, G, MI, NI, WM, WN>(args, acc, s_slot, n0, wm, wn, lane);
  return true;
}

}  // namespace moe_gemm_detail

template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int BLOCK_K, int WARPS_M, int WARPS_N,
          int STAGES>
__global__ void __launch_bounds__(WARPS_M* WARPS_N * 32, 1) moe_gemm_kernel(const MoeGemmArgs args) {
  using namespace moe_gemm_detail;
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool FP8 = quant_is_fp8(QUANT);
  constexpr bool DEQUANT = quant_dequantizes_b(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;
  constexpr bool EPILOGUE_SCALED = quant_scales_in_epilogue(QUANT);
  constexpr int G = GATED ? 2 : 1;                    // accumulator sets: gate (+ up)
  constexpr int THREADS = WARPS_M * WARPS_N * 32;
  constexpr int WM = BLOCK_M / WARPS_M;               // warp tile rows
  constexpr int WN = BLOCK_N / WARPS_N;               // warp tile output columns
  constexpr int MI = WM / 16;                         // m16 fragments per warp
  constexpr int NI = WN / 8;                          // n8 fragments per warp (per set)
  constexpr int B_ROWS = G * BLOCK_N;
  constexpr int EB = quant_activation_bytes(QUANT);   // bytes per A element (and per B element as the mma reads it)
  constexpr int KU = BLOCK_K * EB / 2;                // 16-bit units per smem row of the mma tiles
  constexpr int CHUNKS = KU / 8;                      // 16-byte chunks per mma-tile row
  constexpr int K_PER_CHUNK = 16 / EB;                // elements per 16-byte chunk
  constexpr int B_RAW_ROW = BLOCK_K * quant_weight_bits(QUANT) / 8;  // bytes per stored B row of a k tile
  constexpr int B_RAW_CHUNKS = B_RAW_ROW / 16;
  constexpr int B_K_PER_CHUNK = 128 / quant_weight_bits(QUANT);      // stored elements per 16-byte chunk
  constexpr int A_STAGE = BLOCK_M * KU * 2;           // bytes per ring slot
  // DEQUANT: stored rows padded by 16 bytes, so 8 threads reading 16 bytes of 8 rows hit 8 bank groups.
  constexpr int RAW_PITCH = B_RAW_ROW + (DEQUANT ? 16 : 0);
  constexpr int B_STAGE = B_ROWS * RAW_PITCH;
  static_assert(ROLE == kRoleGemm1 || ACT == kActNone, "GEMM2 has no activation");
  static_assert(KU == 32 || KU == 64 || KU == 128 || KU == 256, "a smem row must be 64, 128, 256 or 512 bytes");
  static_assert(B_RAW_CHUNKS >= 1, "a stored B row of a k tile must hold whole 16-byte chunks");
  static_assert(!BLOCK_SCALED || BLOCK_K == kQuantFp8BlockSize, "block scales: one k tile per 128-wide scale block");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(STAGES >= 2, "the ring needs two slots at least");

  // Launched under the previous kernel's tail on sm_90+ (programmatic dependent launch): wait for
  // its results before reading anything (the tile count included); let the next kernel launch.
  pdl::wait();
  pdl::launch_dependents();
  const int tile = blockIdx.y;
  if (tile >= args.totals[2]) return;
  const int n0 = blockIdx.x * BLOCK_N;
  const int expert = args.tile_expert[tile];
  const int row0 = tile * BLOCK_M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* s_a = smem_raw;                       // [STAGES][BLOCK_M][KU units]
  unsigned char* s_b = s_a + STAGES * A_STAGE;         // [STAGES][B_ROWS][B_RAW_ROW bytes]
  unsigned char* s_bd = s_b + STAGES * B_STAGE;        // DEQUANT: [B_ROWS][KU units] DTYPE
  __shared__ int s_slot[BLOCK_M];     // token * top_k + slot, -1 = padding row
  __shared__ int s_arow[BLOCK_M];     // row of A to read, -1 = zeros
  __shared__ float s_weight[BLOCK_M];
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) + 16 == moe_gemm_static_smem_bytes(BLOCK_M),
                "the host sizes shared memory with moe_gemm_static_smem_bytes");

  moe_tile::stage_rows<ROLE, BLOCK_M, THREADS>(args, row0, s_slot, s_arow, s_weight);

  const unsigned char* a_base = static_cast<const unsigned char*>(args.a);
  const unsigned char* b_base = static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride;
  const int k_tiles = (args.inner + BLOCK_K - 1) / BLOCK_K;
  // Split-K: this CTA's k tiles (the host sizes splits so that none is empty).
  const int per_split = args.k_tiles_per_split > 0 ? args.k_tiles_per_split : k_tiles;
  const int kt_begin = blockIdx.z * per_split;
  const int local_tiles = min(k_tiles, kt_begin + per_split) - kt_begin;

  // Weight row feeding smem B row r (gate rows, then up rows), or -1 past the output columns.
  auto weight_row = [&](int r) {
    const int half = GATED ? r / BLOCK_N : 0;  // 0 = gate, 1 = up
    return moe_tile::weight_row<ACT>(args, n0 + (GATED ? r % BLOCK_N : r), half);
  };
  auto b_scale_index = [&](int wrow, int k) {
    return expert * args.b_scale_expert_stride + (wrow >> args.b_scale_row_shift) * args.b_scale_row_stride +
           (k >> args.b_scale_k_shift);
  };

  auto load_stage = [&](int slot, int kt) {
    const int k0 = kt * BLOCK_K;
    unsigned char* sa = s_a + slot * A_STAGE;
    unsigned char* sb = s_b + slot * B_STAGE;
#pragma unroll
    for (int i = tid; i < BLOCK_M * CHUNKS; i += THREADS) {
      const int r = i / CHUNKS, c = i % CHUNKS, k = k0 + c * K_PER_CHUNK;
      const int arow = s_arow[r];
      const bool valid = arow >= 0 && k < args.inner;
      const unsigned char* src = valid ? a_base + arow * args.lda + k * EB : a_base;
      sm80::cp_async_16(sm80::smem_addr(sa + (r * KU + swizzle<KU>(r, c) * 8) * 2), src, valid);
    }
#pragma unroll
    for (int i = tid; i < B_ROWS * B_RAW_CHUNKS; i += THREADS) {
      const int r = i / B_RAW_CHUNKS, c = i % B_RAW_CHUNKS, k = k0 + c * B_K_PER_CHUNK;
      const int wrow = weight_row(r);
      const bool valid = wrow >= 0 && k < args.inner;
      const unsigned char* src = valid ? b_base + wrow * args.ldb + k * quant_weight_bits(QUANT) / 8 : b_base;
      // Stored as is when DEQUANT (read once, by rows); otherwise swizzled for ldmatrix.
      const int at = DEQUANT ? r * RAW_PITCH + c * 16 : (r * KU + swizzle<KU>(r, c) * 8) * 2;
      sm80::cp_async_16(sm80::smem_addr(sb + at), src, valid);
    }
  };

  // DEQUANT: ring slot -> DTYPE B tile; every element past the ends becomes 0. A unit of work is one
  // B row's run of UNIT_CHUNKS consecutive 8-element chunks (SEGS runs per row when threads outnumber
  // rows); a thread keeps its units for every k tile, so the weight row is found once, and each
  // unit reads its stored bytes 16 at a time. Per element this is ~3 instructions: dequantization,
  // not memory, is what bounds 4-bit decode here.
  constexpr int RAW_CHUNK_BYTES = quant_weight_bits(QUANT);  // stored bytes of 8 elements: 4 or 8
  constexpr int SEGS = DEQUANT && THREADS > B_ROWS ? THREADS / B_ROWS : 1;
  constexpr int UNITS = DEQUANT ? B_ROWS * SEGS / THREADS : 1;  // units per thread
  constexpr int UNIT_CHUNKS = CHUNKS / SEGS;
  constexpr int UNIT_RAW = UNIT_CHUNKS * RAW_CHUNK_BYTES;        // stored bytes per unit and k tile
  static_assert(!DEQUANT || ((THREADS % B_ROWS == 0 || B_ROWS % THREADS == 0) && UNIT_RAW % 16 == 0),
                "dequantization units: rows and threads split evenly, 16 stored bytes at a time");
  int dq_wrow[UNITS];            // weight row of each unit (-1 past the output columns)
  long long dq_scale_row[UNITS];  // index of the unit's first scale (k = 0)
#pragma unroll
  for (int j = 0; j < UNITS; ++j) {
    dq_wrow[j] = DEQUANT ? weight_row((tid + j * THREADS) / SEGS) : -1;
    dq_scale_row[j] = dq_wrow[j] >= 0 ? b_scale_index(dq_wrow[j], 0) : 0;
  }
  auto dequantize_stage = [&](int slot, int kt) {
    const unsigned char* sb = s_b + slot * B_STAGE;
#pragma unroll
    for (int j = 0; j < UNITS; ++j) {
      const int u = tid + j * THREADS, r = u / SEGS, seg = u % SEGS, wrow = dq_wrow[j];
      const unsigned char* raw = sb + r * RAW_PITCH + seg * UNIT_RAW;
#pragma unroll
      for (int q = 0; q < UNIT_RAW / 16; ++q) {
        const uint4 bytes = *reinterpret_cast<const uint4*>(raw + q * 16);
        const unsigned word[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
#pragma unroll
        for (int h = 0; h < 16 / RAW_CHUNK_BYTES; ++h) {  // 4 chunks of 4-bit weights, 2 of int8
          const int c = seg * UNIT_CHUNKS + q * (16 / RAW_CHUNK_BYTES) + h, k = kt * BLOCK_K + c * 8;
          uint4 v = make_uint4(0u, 0u, 0u, 0u);
          if (wrow >= 0 && k < args.inner) {
            float scale = 1.f, zero = 8.f;
            const long long si = dq_scale_row[j] + (k >> args.b_scale_k_shift);
            if constexpr (QUANT == kQuantInt4Group) {
              scale = sm80::to_float<DTYPE>(__ldg(static_cast<const unsigned short*>(args.b_scale) + si));
              if (args.b_zero) zero = static_cast<float>(__ldg(args.b_zero + si));
            } else if constexpr (quant_is_mxfp4(QUANT)) {
              scale = dequant::e8m0_to_float(__ldg(static_cast<const unsigned char*>(args.b_scale) + si));
            }
            const unsigned lo = RAW_CHUNK_BYTES == 4 ? word[h] : word[2 * h];
            const unsigned hi = RAW_CHUNK_BYTES == 4 ? 0u : word[2 * h + 1];
            v = dequant::dequant8<QUANT, DTYPE>(lo, hi, scale, zero);
          }
          *reinterpret_cast<uint4*>(s_bd + (r * KU + swizzle<KU>(r, c) * 8) * 2) = v;
        }
      }
    }
  };

  float acc[G][MI][NI][4];  // per set: [MI x 16 rows] x [NI x 8 columns], mma C fragments
  float part[BLOCK_SCALED ? G : 1][BLOCK_SCALED ? MI : 1][BLOCK_SCALED ? NI : 1][4];  // one scale block's sum
  zero_fragments(acc);

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < local_tiles) load_stage(s, kt_begin + s);
    sm80::cp_async_commit();
  }

  for (int i = 0; i < local_tiles; ++i) {
    const int kt = kt_begin + i;  // k tile; i is its ring position
    // Block scales of this k tile, fetched before the wait so their latency overlaps it.
    float a_sc[BLOCK_SCALED ? MI : 1][2], b_sc[BLOCK_SCALED ? G : 1][BLOCK_SCALED ? NI : 1];
    if constexpr (BLOCK_SCALED) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int arow = s_arow[wm * WM + mi * 16 + (lane >> 2) + h * 8];
          a_sc[mi][h] = arow < 0 ? 0.f : __ldg(args.a_scale + arow * args.a_scale_ld + kt);
        }
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int wrow = weight_row(g * BLOCK_N + wn * WN + ni * 8 + (lane & 3) * 2);
          b_sc[g][ni] = wrow < 0 ? 0.f : __ldg(static_cast<const float*>(args.b_scale) + b_scale_index(wrow, kt * BLOCK_K));
        }
      zero_fragments(part);
    }
    sm80::cp_async_wait<STAGES - 2>();
    __syncthreads();  // slot kt ready for all; slot kt-1 (and the DTYPE B tile) no longer read by anyone
    const int next = i + STAGES - 1;
    if (next < local_tiles) load_stage(next % STAGES, kt_begin + next);
    sm80::cp_async_commit();
    if constexpr (DEQUANT) {
      dequantize_stage(i % STAGES, kt);
      __syncthreads();  // the DTYPE B tile is complete
    }

    const unsigned char* sa = s_a + (i % STAGES) * A_STAGE;
    const unsigned char* sb = DEQUANT ? s_bd : s_b + (i % STAGES) * B_STAGE;
    // fp8 mma.sync is not native on sm_90 (each one becomes conversions + f16 mma): unrolling the
    // whole k tile there keeps every converted fragment live and spills.
#pragma unroll(FP8 ? 1 : (KU / 16 > 4 ? 4 : KU / 16))
    for (int ks = 0; ks < KU / 16; ++ks) {
      unsigned af[MI][4];  // A fragments: 16 rows x 32 bytes each (16 DTYPE or 32 e4m3 k)
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = wm * WM + mi * 16 + (lane & 15);
        const int c = ks * 2 + (lane >> 4);
        sm80::ldmatrix_x4(af[mi], sm80::smem_addr(sa + (r * KU + swizzle<KU>(r, c) * 8) * 2));
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          unsigned bf[4];  // B fragments: 16 columns x 32 bytes (two n8 fragments)
          const int r = g * BLOCK_N + wn * WN + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int c = ks * 2 + ((lane >> 3) & 1);
          sm80::ldmatrix_x4(bf, sm80::smem_addr(sb + (r * KU + swizzle<KU>(r, c) * 8) * 2));
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            if constexpr (BLOCK_SCALED) {
              sm80::mma_16832_e4m3(part[g][mi][2 * nj], af[mi], bf[0], bf[1]);
              sm80::mma_16832_e4m3(part[g][mi][2 * nj + 1], af[mi], bf[2], bf[3]);
            } else if constexpr (FP8) {
              sm80::mma_16832_e4m3(acc[g][mi][2 * nj], af[mi], bf[0], bf[1]);
              sm80::mma_16832_e4m3(acc[g][mi][2 * nj + 1], af[mi], bf[2], bf[3]);
            } else {
              sm80::mma_16816<DTYPE>(acc[g][mi][2 * nj], af[mi], bf[0], bf[1]);
              sm80::mma_16816<DTYPE>(acc[g][mi][2 * nj + 1], af[mi], bf[2], bf[3]);
            }
          }
        }
      }
    }
    if constexpr (BLOCK_SCALED) {
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[g][mi][ni][e] += part[g][mi][ni][e] * (a_sc[mi][e >> 1] * b_sc[g][ni]);
    }
  }
  sm80::cp_async_wait<0>();
  if constexpr (ROLE == kRoleGemm1) {
    if (gridDim.z > 1 && !split_k_finish<G, MI, NI, WM, WN>(args, acc, s_slot, tile, n0, wm, wn, lane)) return;
  }
  // Per-output-row weight scales (int8, fp8 channel / tensor) of the tile's B rows, staged in the
  // (now idle) ring: loading them per fragment in the epilogue cost registers (spills).
  float* s_col_scale = reinterpret_cast<float*>(smem_raw);  // [B_ROWS]
  if constexpr (EPILOGUE_SCALED) {
    static_assert(STAGES * (A_STAGE + B_STAGE) >= B_ROWS * 4, "the ring holds the column scales");
    __syncthreads();  // every warp is done with the ring
    for (int r = tid; r < B_ROWS; r += THREADS) {
      const int wrow = weight_row(r);
      s_col_scale[r] = wrow < 0 ? 0.f : static_cast<const float*>(args.b_scale)[b_scale_index(wrow, 0)];
    }
    __syncthreads();
  }

  moe_store::store_fragments_checked<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, wm * WM, wn * WN, lane, n0, expert,
                                                                        s_slot, s_arow, s_weight, s_col_scale,
                                                                        moe_store::DirectSink<ROLE, DTYPE>{args, row0});
}

}  // namespace moejit
