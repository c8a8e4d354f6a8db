// moe_gemm, sm_90a warpgroup-MMA path (prefill): the grouped GEMM over the routing tile map of
// moe_gemm_sm80.cuh with the tensor-core work on wgmma. Same arguments, tile map, gather, epilogue
// (moe_gemm_store.cuh) and results up to the order of the fp32 sums within a k tile.
//
// CTA = BLOCK_M / 64 warpgroups; warpgroup w computes rows [64 w, +64) of the tile against all B
// rows of the CTA (G * BLOCK_N: gate rows then up rows for gated activations) with one
// m64 n(G * BLOCK_N) k16 wgmma per 16 k, A and B read from shared memory through descriptors.
// k tiles of 64 (128-byte rows) land by cp.async in the 128-byte-swizzle layout wgmma reads (chunk
// c of row r at c ^ (r % 8): the ldmatrix swizzle of the sm80 kernel). Ring of STAGES slots, one
// wgmma group in flight: at k tile i the CTA loads tile i + STAGES - 2 into the slot tile i - 2
// used, which the wgmma wait of iteration i - 1 and the barrier of iteration i have freed.
//
// Tiles are walked in groups of kGroupRows row tiles per column sweep, so the CTAs resident at once
// share each expert's weight columns through L2 instead of streaming all of an expert's weights
// once per row tile.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_gemm_store.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {

// Tiles of 128 weight rows and fewer (64 accumulators per thread) keep registers for two CTAs per
// SM, whose barriers and epilogues then overlap each other's main loops.
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES>
__global__ void __launch_bounds__(BLOCK_M / 64 * 128, (activation_is_gated(ACT) ? 2 : 1) * BLOCK_N <= 128 ? 2 : 1)
    moe_gemm_wgmma_kernel(const MoeGemmArgs args) {
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr int G = GATED ? 2 : 1;                // accumulator sets: gate (+ up)
  constexpr int THREADS = BLOCK_M / 64 * 128;
  constexpr int B_ROWS = G * BLOCK_N;             // wgmma N
  constexpr int NI = BLOCK_N / 8;                 // n8 accumulator chunks per set
  constexpr int BLOCK_K = moe_wgmma_block_k();    // 64 16-bit elements: one 128-byte row
  constexpr int ROW_BYTES = 128;
  constexpr int A_STAGE = BLOCK_M * ROW_BYTES;    // [BLOCK_M][128 B], 8-row atoms of 1024 B
  constexpr int B_STAGE = B_ROWS * ROW_BYTES;     // [B_ROWS][128 B]
  constexpr int A_LOADS = BLOCK_M * 8 / THREADS;  // 16-byte chunks per thread per k tile
  constexpr int B_LOADS = B_ROWS * 8 / THREADS;
  constexpr int kGroupRows = 8;
  static_assert(QUANT == kQuantNone, "the wgmma path takes 16-bit weights");
  static_assert(ROLE == kRoleGemm1 || ACT == kActNone, "GEMM2 has no activation");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "one or two warpgroups of 64 rows");
  static_assert(B_ROWS == 64 || B_ROWS == 128 || B_ROWS == 192 || B_ROWS == 256, "wgmma N of 64, 128, 192 or 256");
  static_assert(STAGES >= 3, "a ring of 3 slots at least: one in the wgmma, one landing, one loading");
  static_assert(A_LOADS * THREADS == BLOCK_M * 8 && B_LOADS * THREADS == B_ROWS * 8, "16-byte chunks share out evenly");
#if MOEJIT_HAS_WGMMA
  pdl::wait();
  pdl::launch_dependents();
  // Grouped walk: linear CTA index -> (row tile, column tile), kGroupRows row tiles per sweep.
  const int linear = blockIdx.y * gridDim.x + blockIdx.x;
  const int group_size = kGroupRows * gridDim.x;
  const int first_tile = linear / group_size * kGroupRows;
  const int rows_in_group = min(kGroupRows, static_cast<int>(gridDim.y) - first_tile);
  const int tile = first_tile + linear % group_size % rows_in_group;
  const int n0 = linear % group_size / rows_in_group * BLOCK_N;
  if (tile >= args.totals[2]) return;
  const int expert = args.tile_expert[tile];
  const int row0 = tile * BLOCK_M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle atoms need 1024-byte alignment; the host adds 1024 bytes of slack.
  unsigned char* s_a = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~static_cast<unsigned long long>(1023));
  unsigned char* s_b = s_a + STAGES * A_STAGE;  // [STAGES][B_ROWS][128 B]
  __shared__ int s_slot[BLOCK_M];
  __shared__ int s_arow[BLOCK_M];
  __shared__ float s_weight[BLOCK_M];
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) <= moe_gemm_static_smem_bytes(BLOCK_M),
                "the host sizes shared memory with moe_gemm_static_smem_bytes");
  moe_tile::stage_rows<ROLE, BLOCK_M, THREADS>(args, row0, s_slot, s_arow, s_weight);

  const int k_tiles = (args.inner + BLOCK_K - 1) / BLOCK_K;
  const int per_split = args.k_tiles_per_split > 0 ? args.k_tiles_per_split : k_tiles;
  const int kt_begin = blockIdx.z * per_split;
  const int local_tiles = min(k_tiles, kt_begin + per_split) - kt_begin;

  // Each thread copies the same rows' chunks at every k tile: sources found once. Chunk i of the
  // thread is row (tid + i * THREADS) / 8, column chunk tid % 8 (THREADS is a multiple of 8).
  const int chunk = tid % 8;
  const unsigned char* a_src[A_LOADS];
  const unsigned char* b_src[B_LOADS];
  unsigned a_dst[A_LOADS], b_dst[B_LOADS];  // byte offsets in a slot
#pragma unroll
  for (int i = 0; i < A_LOADS; ++i) {
    const int r = (tid + i * THREADS) / 8, arow = s_arow[r];
    a_src[i] = arow < 0 ? nullptr : static_cast<const unsigned char*>(args.a) + arow * args.lda + chunk * 16;
    a_dst[i] = r * ROW_BYTES + ((chunk ^ (r & 7)) * 16);
  }
#pragma unroll
  for (int i = 0; i < B_LOADS; ++i) {
    const int r = (tid + i * THREADS) / 8;
    const int wrow = moe_tile::weight_row<ACT>(args, n0 + (GATED ? r % BLOCK_N : r), GATED ? r / BLOCK_N : 0);
    b_src[i] = wrow < 0 ? nullptr
                        : static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride + wrow * args.ldb + chunk * 16;
    b_dst[i] = r * ROW_BYTES + ((chunk ^ (r & 7)) * 16);
  }
  const unsigned smem_a = sm80::smem_addr(s_a), smem_b = sm80::smem_addr(s_b);
  // Zero-filled past the ends: padding rows, columns past n_out, the K tail.
  auto load_stage = [&](int slot, int kt) {
    const int k = kt * BLOCK_K + chunk * 8;
    const bool k_ok = k < args.inner;
    const long long koff = static_cast<long long>(kt) * BLOCK_K * 2;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const bool valid = k_ok && a_src[i] != nullptr;
      sm80::cp_async_16(smem_a + slot * A_STAGE + a_dst[i], valid ? a_src[i] + koff : args.a, valid);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const bool valid = k_ok && b_src[i] != nullptr;
      sm80::cp_async_16(smem_b + slot * B_STAGE + b_dst[i], valid ? b_src[i] + koff : args.b, valid);
    }
  };

  float acc[G][1][NI][4];  // wgmma m64 n(B_ROWS) accumulators: set s, chunk ni = wgmma chunk s * NI + ni
  float* d = &acc[0][0][0][0];
#pragma unroll
  for (int e = 0; e < G * NI * 4; ++e) d[e] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < local_tiles) load_stage(s, kt_begin + s);
    sm80::cp_async_commit();
  }
  const int wg = warp / 4;
  for (int i = 0; i < local_tiles; ++i) {
    sm80::cp_async_wait<STAGES - 3>();
    sm90::fence_proxy_async();  // this thread's cp.async writes -> the async proxy
    __syncthreads();            // tile i landed for all; tile i - 2's wgmmas are done in every warpgroup
    const int slot = i % STAGES;
    const unsigned long long desc_a = sm90::sw128_desc(smem_a + slot * A_STAGE + wg * 64 * ROW_BYTES);
    const unsigned long long desc_b = sm90::sw128_desc(smem_b + slot * B_STAGE);
    sm90::fence();
#pragma unroll
    for (int ks = 0; ks < BLOCK_K / 16; ++ks) {  // 32 bytes of k per step: +2 in the descriptor
      if constexpr (DTYPE == kDTypeBF16) {
        if constexpr (B_ROWS == 64) sm90::mma_m64n64k16_bf16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 128) sm90::mma_m64n128k16_bf16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 192) sm90::mma_m64n192k16_bf16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 256) sm90::mma_m64n256k16_bf16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
      } else {
        if constexpr (B_ROWS == 64) sm90::mma_m64n64k16_f16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 128) sm90::mma_m64n128k16_f16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 192) sm90::mma_m64n192k16_f16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
        if constexpr (B_ROWS == 256) sm90::mma_m64n256k16_f16(d, desc_a + 2 * ks, desc_b + 2 * ks, 1);
      }
    }
    sm90::commit();
    const int next = i + STAGES - 2;
    if (next < local_tiles) load_stage(next % STAGES, kt_begin + next);
    sm80::cp_async_commit();
    sm90::wait<1>();
  }
  sm90::wait<0>();
#pragma unroll
  for (int e = 0; e < G * NI * 4; ++e) sm90::fence_operand(d[e]);
  sm80::cp_async_wait<0>();

  // Epilogue through shared memory: the finished tile is staged in the (now idle) ring, rows padded
  // so that the fragment writes are conflict-free, then each row leaves in one bulk copy (GEMM1:
  // DTYPE intermediate; GEMM2 rows: fp32 per slot) or one bulk fp32 add into its token's row (the
  // top-k sum). Fragment-order global stores and atomics cost more than the main loop of narrow
  // layers: each warp instruction touched 8 rows.
  constexpr int OUT_BYTES = ROLE == kRoleGemm1 ? 2 : 4;
  constexpr int PITCH = BLOCK_N + 8;  // elements per staged row: 16-byte aligned, fragment writes spread over the banks
  static_assert(BLOCK_M * PITCH * OUT_BYTES <= STAGES * (A_STAGE + B_STAGE), "the ring holds the output tile");
  __syncthreads();  // every warpgroup is done with the ring
  unsigned char* s_out = s_a;
  auto stage = [&](int rl, int col, int, float a, float b) {
    const int at = rl * PITCH + col - n0;
    if constexpr (ROLE == kRoleGemm1) *reinterpret_cast<unsigned*>(s_out + at * 2) = sm80::pack2<DTYPE>(a, b);
    else *reinterpret_cast<float2*>(s_out + at * 4) = make_float2(a, b);
  };
  // Warp w of warpgroup wg holds rows 64 wg + 16 (w % 4) .. +16 of the tile, every column.
  moe_store::store_fragments<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, wg * 64 + (warp % 4) * 16, 0, lane, n0, expert,
                                                                s_slot, s_arow, s_weight, nullptr, stage);
  sm90::fence_proxy_async();  // the staged tile -> the copy engine
  __syncthreads();
  static_assert(THREADS >= BLOCK_M, "a thread per tile row");
  if (tid < BLOCK_M && s_slot[tid] >= 0) {
    const int slot = s_slot[tid];
    const unsigned src = smem_a + tid * PITCH * OUT_BYTES;
    const unsigned bytes = min(BLOCK_N, args.n_out - n0) * OUT_BYTES;  // n_out is a multiple of 8: whole 16 bytes
    if constexpr (ROLE == kRoleGemm1) {
      sm90::bulk_store(static_cast<unsigned short*>(args.c) + (row0 + tid) * args.ldc + n0, src, bytes);
    } else if constexpr (ROLE == kRoleGemm2Rows) {
      sm90::bulk_store(static_cast<float*>(args.c) + slot * args.ldc + n0, src, bytes);
    } else {
      sm90::bulk_add_f32(static_cast<float*>(args.c) + (slot / args.top_k) * args.ldc + n0, src, bytes);
    }
    sm90::bulk_commit();
    sm90::bulk_wait_read();  // the source must outlive the CTA's shared memory
  }
#else
  __trap();  // the host builds this family for sm_90a only
#endif
}

}  // namespace moejit
