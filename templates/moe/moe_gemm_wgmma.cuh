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
// The persistent variant (persistent_tiles, moe_gemm_wgmma_persistent.cuh) reads weight tiles,
// and GEMM2's A tiles, by bulk tensor copies instead (MoeGemmArgs::b_tensor_map / a_tensor_map; the copy engine's 128-byte
// swizzle is the same chunk pattern).
//
// Tiles are walked in groups of MoeGemmArgs::walk_rows row tiles per column sweep, so the CTAs resident
// at once share each expert's weight columns through L2 instead of streaming all of an expert's
// weights once per row tile (moe_tile_walk.cuh).
#pragma once

#include "common/dependent_launch.cuh"
#include "moe/moe_gemm_wgmma_parts.cuh"
#include "moe/moe_gemm_wgmma_persistent.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace moe_wgmma_detail {

#if MOEJIT_HAS_WGMMA
// One tile per CTA; every thread loads and multiplies. Ring of STAGES slots with one wgmma group
// in flight: at k tile i the CTA loads tile i + STAGES - 2 into the slot tile i - 2 used, which
// the wgmma wait of iteration i - 1 and the barrier of iteration i have freed. The epilogue stages
// the tile in the idle ring and writes each row with one bulk copy or bulk fp32 add.
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES>
__device__ inline void plain_tile(const MoeGemmArgs& args, unsigned char* s_a, int kt_begin, int local_tiles,
                                  int* s_slot, int* s_arow, float* s_weight) {
  using T = Tile<ROLE, DTYPE, ACT, BLOCK_M, BLOCK_N, STAGES>;
  constexpr int THREADS = T::CONSUMER_THREADS;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp / 4;
  int tile, n0;
  walk_item(args, blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, BLOCK_N, tile, n0);
  if (tile >= args.totals[2]) return;
  const int expert = args.tile_expert[tile];
  const int row0 = tile * BLOCK_M;
  moe_tile::stage_rows<ROLE, BLOCK_M, THREADS>(args, row0, s_slot, s_arow, s_weight);
  ChunkLoader<ROLE, ACT, QUANT, BLOCK_M, BLOCK_N, THREADS> loader;
  loader.init(args, row0, n0, expert, tid);
  const unsigned smem_a = sm80::smem_addr(s_a), smem_b = smem_a + STAGES * T::A_STAGE;
  auto load_stage = [&](int slot, int kt) {
    loader.issue(args, smem_a + slot * T::A_STAGE, smem_b + slot * T::B_STAGE, kt);
  };
  // fp8 per channel / tensor: the weight scale of each B row, read by the epilogue (after the ring
  // and the persistent variant's barriers; the main loop's barriers publish it).
  constexpr bool EPILOGUE_SCALED = quant_scales_in_epilogue(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;
  constexpr bool PROMOTED = quant_promotes_k_tiles(QUANT);
  float* s_col_scale = reinterpret_cast<float*>(s_a + STAGES * (T::A_STAGE + T::B_STAGE) + STAGES * 16);
  if constexpr (EPILOGUE_SCALED) column_scales<ACT, BLOCK_N, T::B_ROWS>(args, n0, expert, tid, THREADS, s_col_scale);

  float acc[T::G][1][T::NI][4];  // wgmma m64 n(B_ROWS) accumulators: set s, chunk ni = wgmma chunk s * NI + ni
  float* d = &acc[0][0][0][0];
  // fp8: one k tile's sums, added into acc (quant_promotes_k_tiles); 128 x 128 blocks times
  // a_scale(row, k tile) x b_scale(set's weight-row block, k tile) (the host keeps each set's rows
  // in one block).
  float part[PROMOTED ? T::G * T::NI * 4 : 1];
#pragma unroll
  for (int e = 0; e < T::G * T::NI * 4; ++e) d[e] = 0.f;
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < local_tiles) load_stage(s, kt_begin + s);
    sm80::cp_async_commit();
  }
  using Scales = BlockScales<T::G, BLOCK_N>;
  Scales scales;
  if constexpr (BLOCK_SCALED) scales.template init<ACT>(args, s_arow, wg * 64 + (warp % 4) * 16 + (lane >> 2), n0, expert);
  for (int i = 0; i < local_tiles; ++i) {
    float a_sc[2] = {0.f, 0.f}, b_sc[Scales::SLOTS];
    if constexpr (BLOCK_SCALED) scales.load(args, kt_begin + i, a_sc, b_sc);  // before the wait: their latency overlaps it
    sm80::cp_async_wait<STAGES - 3>();
    sm90::fence_proxy_async();  // this thread's cp.async writes -> the async proxy
    __syncthreads();            // tile i landed for all; tile i - 2's wgmmas are done in every warpgroup
    const int slot = i % STAGES;
    sm90::fence();
    mma_k_tile<DTYPE, QUANT, T::B_ROWS>(PROMOTED ? part : d,
                                        sm90::sw128_desc(smem_a + slot * T::A_STAGE + wg * 64 * kRowBytes),
                                        sm90::sw128_desc(smem_b + slot * T::B_STAGE), PROMOTED ? 0 : 1);
    sm90::commit();
    const int next = i + STAGES - 2;
    if (next < local_tiles) load_stage(next % STAGES, kt_begin + next);
    sm80::cp_async_commit();
    if constexpr (PROMOTED) {
      sm90::wait<0>();
      if constexpr (BLOCK_SCALED) promote_block<T::G, BLOCK_N, T::B_ROWS>(d, part, a_sc, b_sc);
      else promote_sum<T::G * T::NI * 4>(d, part);
    } else {
      sm90::wait<1>();
    }
  }
  sm90::wait<0>();
#pragma unroll
  for (int e = 0; e < T::G * T::NI * 4; ++e) sm90::fence_operand(d[e]);
  sm80::cp_async_wait<0>();

  // Epilogue through shared memory (StagedTile), in the now idle ring.
  using Out = StagedTile<ROLE, DTYPE, BLOCK_N>;
  static_assert(BLOCK_M * Out::PITCH * Out::OUT_BYTES <= STAGES * (T::A_STAGE + T::B_STAGE), "the ring holds the output tile");
  __syncthreads();  // every warpgroup is done with the ring
  const Out out{s_a, n0};
  // Warp w of warpgroup wg holds rows 64 wg + 16 (w % 4) .. +16 of the tile, every column.
  moe_store::store_fragments<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, wg * 64 + (warp % 4) * 16, 0, lane, n0, expert,
                                                                s_slot, s_arow, s_weight, s_col_scale, out);
  // One tile a CTA: nothing for bulk copies to overlap, so rows leave by the lanes' stores but for
  // the fp32 top-k adds (bulk reductions).
  if constexpr (Out::kBulkOut) {
    sm90::fence_proxy_async();  // the staged tile -> the copy engine
    __syncthreads();
    static_assert(THREADS >= BLOCK_M, "a thread per tile row");
    if (tid < BLOCK_M && s_slot[tid] >= 0) {
      out.store_row(args, row0, tid, s_slot[tid]);
      sm90::bulk_wait_read();  // the source must outlive the CTA's shared memory
    }
  } else {
    // Warp w staged rows 16 w .. 16 w + 15 (64 wg + 16 (w % 4)) and copies them out.
    static_assert(THREADS / 32 * 16 == BLOCK_M, "16 rows a warp");
    __syncwarp();
    out.copy_rows(args, row0, warp * 16, lane, s_slot);
  }
}
#endif

}  // namespace moe_wgmma_detail

// Plain tiles of 128 weight rows and fewer (64 accumulators per thread) keep registers for two
// CTAs per SM, whose barriers and epilogues then overlap each other's main loops (not with fp8:
// the second accumulator set of quant_promotes_k_tiles needs the registers).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_min_ctas(int act, int quant, int block_n, bool persistent) {
  return !persistent && !quant_promotes_k_tiles(quant) && (activation_is_gated(act) ? 2 : 1) * block_n <= 128 ? 2 : 1;
}
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES, int PERSISTENT, int STAGED,
          int PINGPONG, int MULTICAST>
__global__ void __launch_bounds__(moe_wgmma_threads(BLOCK_M, PERSISTENT, PINGPONG, QUANT, DTYPE),
                                  moe_wgmma_min_ctas(ACT, QUANT, BLOCK_N, PERSISTENT))
    moe_gemm_wgmma_kernel(const __grid_constant__ MoeGemmArgs args) {
  static_assert(QUANT == kQuantNone || quant_is_fp8(QUANT) || (quant_dequantizes_b(QUANT) && PERSISTENT),
                "16-bit weights, fp8 w8a8, or weight-only formats on the persistent variant");
  static_assert(ROLE == kRoleGemm1 || ACT == kActNone, "GEMM2 has no activation");
  static_assert(!STAGED || PERSISTENT, "the plain variant always stages its tile in the idle ring");
  static_assert(!PINGPONG || PERSISTENT, "ping-pong groups are the persistent variant's");
  static_assert(!MULTICAST || PERSISTENT, "multicast pairs are the persistent variant's");
#if MOEJIT_HAS_WGMMA
  using T = moe_wgmma_detail::Tile<ROLE, DTYPE, ACT, BLOCK_M, BLOCK_N, STAGES>;
  pdl::wait();
  pdl::launch_dependents();
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle atoms need 1024-byte alignment; the host adds 1024 bytes of slack. The persistent
  // variant's barriers follow the ring.
  unsigned char* s_a = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~static_cast<unsigned long long>(1023));
  constexpr int ROWS = moe_wgmma_rows_held(BLOCK_M, PINGPONG);
  __shared__ int s_slot[ROWS];
  __shared__ int s_arow[ROWS];
  __shared__ float s_weight[ROWS];
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) <= moe_gemm_static_smem_bytes(ROWS),
                "the host sizes shared memory with moe_gemm_static_smem_bytes");
  const int k_tiles = (args.inner + moe_wgmma_block_k(QUANT) - 1) / moe_wgmma_block_k(QUANT);
  const int per_split = args.k_tiles_per_split > 0 ? args.k_tiles_per_split : k_tiles;
  const int kt_begin = blockIdx.z * per_split;
  const int local_tiles = min(k_tiles, kt_begin + per_split) - kt_begin;
  if constexpr (PERSISTENT) {
    auto* bars = reinterpret_cast<unsigned long long*>(s_a + STAGES * (T::A_STAGE + T::B_STAGE));
    __shared__ unsigned long long s_queue_bars[kMoeWorkQueueDepth];
    __shared__ int s_queue[kMoeWorkQueueDepth];
    static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) + sizeof(s_queue_bars) + sizeof(s_queue) <=
                      moe_wgmma_static_smem_bytes(ROWS),
                  "the host sizes shared memory with moe_wgmma_static_smem_bytes");
    moe_wgmma_detail::persistent_tiles<ROLE, DTYPE, ACT, QUANT, BLOCK_M, BLOCK_N, STAGES, STAGED != 0, PINGPONG != 0,
                                       MULTICAST != 0>(
        args, s_a, kt_begin, local_tiles, s_slot, s_arow, s_weight, bars, s_queue, s_queue_bars);
  } else {
    moe_wgmma_detail::plain_tile<ROLE, DTYPE, ACT, QUANT, BLOCK_M, BLOCK_N, STAGES>(args, s_a, kt_begin, local_tiles,
                                                                                   s_slot, s_arow, s_weight);
  }
#else
  __trap();  // the host builds this family for sm_90a only
#endif
}

}  // namespace moejit
