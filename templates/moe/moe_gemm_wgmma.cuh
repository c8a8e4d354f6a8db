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
// The persistent variant (persistent_tiles) reads weight tiles, and GEMM2's A tiles, by bulk
// tensor copies instead (MoeGemmArgs::b_tensor_map / a_tensor_map; the copy engine's 128-byte
// swizzle is the same chunk pattern).
//
// Tiles are walked in groups of MoeGemmArgs::walk_rows row tiles per column sweep, so the CTAs resident
// at once share each expert's weight columns through L2 instead of streaming all of an expert's
// weights once per row tile (moe_tile_walk.cuh).
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_gemm_store.cuh"
#include "moe/moe_tile_rows.cuh"
#include "moe/moe_tile_walk.cuh"

namespace moejit {
namespace moe_wgmma_detail {

constexpr int kRowBytes = 128;  // a k tile row: 64 16-bit elements, the 128-byte swizzle's width

// Work item -> (row tile, first output column) of the grouped walk (moe_tile_walk.cuh), walk_rows
// row tiles per column sweep (0: the default).
__device__ inline void walk_item(const MoeGemmArgs& args, int item, int col_tiles, int row_tiles, int block_n, int& tile,
                                 int& n0) {
  const MoeWalkItem w =
      moe_walk_item(item, col_tiles, row_tiles, args.walk_rows > 0 ? args.walk_rows : kMoeWalkGroupRows);
  tile = w.tile;
  n0 = w.col_tile * block_n;
}

// The 16-byte chunks one thread copies into every k tile of a row tile: chunk tid % 8 of rows
// (tid + i * THREADS) / 8. Only the rows are kept (A: gathered row or -1; B: weight row or -1):
// the producer warpgroup of the persistent variant runs on few registers. Zero-filled past the
// ends: padding rows, columns past n_out, the K tail.
// B_TMA: the weights come by bulk tensor copies (issued elsewhere); only A's chunks here.
template <int ROLE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int THREADS, bool B_TMA = false>
struct ChunkLoader {
  static constexpr int G = activation_is_gated(ACT) ? 2 : 1;
  static constexpr int A_LOADS = BLOCK_M * 8 / THREADS;  // (A by bulk copies: this loader is not used)
  static constexpr int B_LOADS = B_TMA ? 0 : G * BLOCK_N * 8 / THREADS;
  static_assert(A_LOADS * THREADS == BLOCK_M * 8 && (B_TMA || B_LOADS * THREADS == G * BLOCK_N * 8),
                "16-byte chunks share out evenly");
  int a_row[A_LOADS], b_row[B_LOADS > 0 ? B_LOADS : 1];
  const unsigned char* b_base;  // the expert's weights + this thread's chunk
  int tid;

  __device__ void init(const MoeGemmArgs& args, int row0, int n0, int expert, int thread) {
    tid = thread;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8, slot = args.gather_index[row0 + r];
      a_row[i] = slot < 0 ? -1 : (ROLE == kRoleGemm1 ? slot / args.top_k : row0 + r);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8;
      b_row[i] = moe_tile::weight_row<ACT>(args, n0 + (G == 2 ? r % BLOCK_N : r), G == 2 ? r / BLOCK_N : 0);
    }
    b_base = static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride + (tid % 8) * 16;
  }
  // cp.async of k tile kt into the slot whose A and B tiles start at shared addresses sa, sb.
  __device__ void issue(const MoeGemmArgs& args, unsigned sa, unsigned sb, int kt) const {
    // A k tile is one 128-byte row of 16-bit or e4m3 elements; a chunk 16 bytes of it.
    const int chunk = tid % 8;
    const bool k_ok = kt * moe_wgmma_block_k(QUANT) + chunk * (16 / quant_activation_bytes(QUANT)) < args.inner;
    const long long koff = static_cast<long long>(kt) * kRowBytes + chunk * 16;
    const unsigned char* a_base = static_cast<const unsigned char*>(args.a);
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8;
      const bool valid = k_ok && a_row[i] >= 0;
      sm80::cp_async_16(sa + r * kRowBytes + (chunk ^ (r & 7)) * 16, valid ? a_base + a_row[i] * args.lda + koff : a_base,
                        valid);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8;
      const bool valid = k_ok && b_row[i] >= 0;
      sm80::cp_async_16(sb + r * kRowBytes + (chunk ^ (r & 7)) * 16,
                        valid ? b_base + b_row[i] * args.ldb + (koff - chunk * 16) : b_base, valid);
    }
  }
};

#if MOEJIT_HAS_WGMMA
// d[64 x B_ROWS] (+)= the warpgroup's 64 A rows x B rows over one k tile: 4 steps of 32 bytes
// (k16 of 16-bit, k32 of e4m3 elements; the descriptors step 32 bytes along the swizzled rows).
// accumulate = 0: the first step overwrites d (a k tile's own sums, fp8 block scales).
template <int DTYPE, int QUANT, int B_ROWS>
__device__ inline void mma_k_tile(float* d, unsigned long long desc_a, unsigned long long desc_b, int accumulate = 1) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const unsigned long long a = desc_a + 2 * ks, b = desc_b + 2 * ks;
    const int acc = ks > 0 ? 1 : accumulate;
    if constexpr (quant_is_fp8(QUANT)) {
      if constexpr (B_ROWS == 64) sm90::mma_m64n64k32_e4m3(d, a, b, acc);
      if constexpr (B_ROWS == 128) sm90::mma_m64n128k32_e4m3(d, a, b, acc);
      if constexpr (B_ROWS == 192) sm90::mma_m64n192k32_e4m3(d, a, b, acc);
      if constexpr (B_ROWS == 256) sm90::mma_m64n256k32_e4m3(d, a, b, acc);
    } else if constexpr (DTYPE == kDTypeBF16) {
      if constexpr (B_ROWS == 64) sm90::mma_m64n64k16_bf16(d, a, b, acc);
      if constexpr (B_ROWS == 128) sm90::mma_m64n128k16_bf16(d, a, b, acc);
      if constexpr (B_ROWS == 192) sm90::mma_m64n192k16_bf16(d, a, b, acc);
      if constexpr (B_ROWS == 256) sm90::mma_m64n256k16_bf16(d, a, b, acc);
    } else {
      if constexpr (B_ROWS == 64) sm90::mma_m64n64k16_f16(d, a, b, acc);
      if constexpr (B_ROWS == 128) sm90::mma_m64n128k16_f16(d, a, b, acc);
      if constexpr (B_ROWS == 192) sm90::mma_m64n192k16_f16(d, a, b, acc);
      if constexpr (B_ROWS == 256) sm90::mma_m64n256k16_f16(d, a, b, acc);
    }
  }
}

// fp8 128 x 128 blocks: the scales of k tile kt for the two accumulator rows a lane holds (rows
// `row` and `row` + 8 of the tile) and for each set's weight-row block (the host keeps each set's
// rows of a tile in one block).
template <int ACT, int G>
__device__ inline void block_scales(const MoeGemmArgs& args, const int* s_arow, int row, int n0, int expert, int kt,
                                    float (&a_sc)[2], float (&b_sc)[G]) {
  const float* b_scale = static_cast<const float*>(args.b_scale);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int arow = s_arow[row + 8 * h];
    a_sc[h] = arow < 0 ? 0.f : __ldg(args.a_scale + arow * args.a_scale_ld + kt);
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int wrow = moe_tile::weight_row<ACT>(args, n0, g);
    b_sc[g] = __ldg(b_scale + expert * args.b_scale_expert_stride + (wrow >> 7) * args.b_scale_row_stride + kt);
  }
}
// d += one k tile's sums (part, waited for) x a_scale(row) x b_scale(set).
template <int G, int NI>
__device__ inline void promote_block(float* d, float* part, const float (&a_sc)[2], const float (&b_sc)[G]) {
#pragma unroll
  for (int e = 0; e < G * NI * 4; ++e) {
    sm90::fence_operand(part[e]);
    // e = (set * NI + chunk) * 4 + j: j / 2 picks the row (lane / 4 or + 8)
    d[e] += part[e] * (a_sc[(e >> 1) & 1] * b_sc[e / (NI * 4)]);
  }
}
#endif

// fp8 per channel / tensor: the weight scale of each of the tile's B rows (gate rows, then up
// rows), read by the epilogue.
template <int ACT, int BLOCK_N, int B_ROWS>
__device__ inline void column_scales(const MoeGemmArgs& args, int n0, int expert, int tid, int threads,
                                     float* s_col_scale) {
  static_assert(B_ROWS <= 256, "moe_wgmma_smem_bytes reserves 256 column scales");
  const float* b_scale = static_cast<const float*>(args.b_scale);
  for (int r = tid; r < B_ROWS; r += threads) {
    const int wrow = moe_tile::weight_row<ACT>(args, n0 + r % BLOCK_N, B_ROWS > BLOCK_N ? r / BLOCK_N : 0);
    s_col_scale[r] = wrow < 0 ? 0.f
                              : b_scale[expert * args.b_scale_expert_stride +
                                        (wrow >> args.b_scale_row_shift) * args.b_scale_row_stride];
  }
}

// Epilogue through shared memory: a finished tile staged at s_out ([BLOCK_M][PITCH] of the output
// type; PITCH = BLOCK_N + 8 spreads the fragment writes over the banks and keeps rows 16-byte
// aligned), then each row leaves in one bulk copy (GEMM1: DTYPE intermediate; GEMM2 rows: fp32 or
// DTYPE per slot) or one bulk fp32 add into its token's row (the top-k sum). Fragment-order global
// stores and atomics cost more than the main loop of narrow layers: each warp instruction touched
// 8 rows.
template <int ROLE, int DTYPE, int BLOCK_N>
struct StagedTile {
  static constexpr bool OUT16 = moe_wgmma_out_bytes(ROLE) == 2;  // DTYPE rows, else fp32
  static constexpr int OUT_BYTES = moe_wgmma_out_bytes(ROLE);
  static constexpr int PITCH = BLOCK_N + 8;
  unsigned char* s_out;
  int n0;
  __device__ void operator()(int rl, int col, int, float a, float b) const {
    const int at = rl * PITCH + col - n0;
    if constexpr (OUT16) *reinterpret_cast<unsigned*>(s_out + at * 2) = sm80::pack2<DTYPE>(a, b);
    else *reinterpret_cast<float2*>(s_out + at * 4) = make_float2(a, b);
  }
  // Row rl (routed slot `slot` >= 0) of tile row0 to global memory; committed as one bulk group.
  __device__ void store_row(const MoeGemmArgs& args, int row0, int rl, int slot) const {
    const unsigned src = sm80::smem_addr(s_out + rl * PITCH * OUT_BYTES);
    const unsigned bytes = min(BLOCK_N, args.n_out - n0) * OUT_BYTES;  // n_out is a multiple of 8: whole 16 bytes
    if constexpr (ROLE == kRoleGemm1) {
      sm90::bulk_store(static_cast<unsigned short*>(args.c) + (row0 + rl) * args.ldc + n0, src, bytes);
    } else if constexpr (ROLE == kRoleGemm2Rows) {
      sm90::bulk_store(static_cast<float*>(args.c) + slot * args.ldc + n0, src, bytes);
    } else if constexpr (ROLE == kRoleGemm2Rows16) {
      sm90::bulk_store(static_cast<unsigned short*>(args.c) + slot * args.ldc + n0, src, bytes);
    } else {
      sm90::bulk_add_f32(static_cast<float*>(args.c) + (slot / args.top_k) * args.ldc + n0, src, bytes);
    }
    sm90::bulk_commit();
  }
};

}  // namespace moe_wgmma_detail

namespace moe_wgmma_detail {

template <int ROLE, int DTYPE, int ACT, int BLOCK_M, int BLOCK_N, int STAGES>
struct Tile {
  static constexpr int G = activation_is_gated(ACT) ? 2 : 1;  // accumulator sets: gate (+ up)
  static constexpr int CONSUMER_THREADS = BLOCK_M / 64 * 128;
  static constexpr int B_ROWS = G * BLOCK_N;                   // wgmma N
  static constexpr int NI = BLOCK_N / 8;                       // n8 accumulator chunks per set
  static constexpr int A_STAGE = BLOCK_M * kRowBytes;          // [BLOCK_M][128 B], 8-row atoms of 1024 B
  static constexpr int B_STAGE = B_ROWS * kRowBytes;           // [B_ROWS][128 B]
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "one or two warpgroups of 64 rows");
  static_assert(B_ROWS == 64 || B_ROWS == 128 || B_ROWS == 192 || B_ROWS == 256, "wgmma N of 64, 128, 192 or 256");
  static_assert(STAGES >= 3, "a ring of 3 slots at least");
};

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
  float* s_col_scale = reinterpret_cast<float*>(s_a + STAGES * (T::A_STAGE + T::B_STAGE) + STAGES * 16);
  if constexpr (EPILOGUE_SCALED) column_scales<ACT, BLOCK_N, T::B_ROWS>(args, n0, expert, tid, THREADS, s_col_scale);

  float acc[T::G][1][T::NI][4];  // wgmma m64 n(B_ROWS) accumulators: set s, chunk ni = wgmma chunk s * NI + ni
  float* d = &acc[0][0][0][0];
  // fp8 128 x 128 blocks: one k tile's sums, added into acc times a_scale(row, k tile) x
  // b_scale(set's weight-row block, k tile) (the host keeps each set's rows in one block).
  float part[BLOCK_SCALED ? T::G * T::NI * 4 : 1];
#pragma unroll
  for (int e = 0; e < T::G * T::NI * 4; ++e) d[e] = 0.f;
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < local_tiles) load_stage(s, kt_begin + s);
    sm80::cp_async_commit();
  }
  for (int i = 0; i < local_tiles; ++i) {
    float a_sc[2] = {0.f, 0.f}, b_sc[T::G];
    if constexpr (BLOCK_SCALED)  // fetched before the wait: their latency overlaps it
      block_scales<ACT, T::G>(args, s_arow, wg * 64 + (warp % 4) * 16 + (lane >> 2), n0, expert, kt_begin + i, a_sc, b_sc);
    sm80::cp_async_wait<STAGES - 3>();
    sm90::fence_proxy_async();  // this thread's cp.async writes -> the async proxy
    __syncthreads();            // tile i landed for all; tile i - 2's wgmmas are done in every warpgroup
    const int slot = i % STAGES;
    sm90::fence();
    mma_k_tile<DTYPE, QUANT, T::B_ROWS>(BLOCK_SCALED ? part : d,
                                        sm90::sw128_desc(smem_a + slot * T::A_STAGE + wg * 64 * kRowBytes),
                                        sm90::sw128_desc(smem_b + slot * T::B_STAGE), BLOCK_SCALED ? 0 : 1);
    sm90::commit();
    const int next = i + STAGES - 2;
    if (next < local_tiles) load_stage(next % STAGES, kt_begin + next);
    sm80::cp_async_commit();
    if constexpr (BLOCK_SCALED) {
      sm90::wait<0>();
      promote_block<T::G, T::NI>(d, part, a_sc, b_sc);
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
  sm90::fence_proxy_async();  // the staged tile -> the copy engine
  __syncthreads();
  static_assert(THREADS >= BLOCK_M, "a thread per tile row");
  if (tid < BLOCK_M && s_slot[tid] >= 0) {
    out.store_row(args, row0, tid, s_slot[tid]);
    sm90::bulk_wait_read();  // the source must outlive the CTA's shared memory
  }
}

// Persistent, warp-specialized: warpgroup 0 produces (cp.async into the ring, each thread's
// copies signalling the slot's `full` barrier as they land), the others consume (wait for `full`,
// wgmma, release the slot through `empty` once the wgmma that read it is done). The CTA walks
// work items blockIdx.x, + gridDim.x, ... of the grouped walk; the producer runs up to STAGES k
// tiles ahead, across row tiles, so the next tile's loads overlap this tile's epilogue and no
// tile starts with an empty pipeline.
// PINGPONG (64-row tiles): two consumer warpgroups ("groups") take the CTA's items in turn, each a
// whole tile with row arrays of its own; a group starts its k loop once the other has issued the
// last wgmma of the item before (turn barriers), so the k loops alternate and each group's epilogue
// runs under the other's wgmmas. The turns also keep a group from waiting on a slot's `full` barrier
// more than one phase ahead of the producer (its parity would then pass on an older phase).
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES, bool STAGED, bool PINGPONG>
__device__ inline void persistent_tiles(const MoeGemmArgs& args, unsigned char* s_a, int kt_begin, int local_tiles,
                                        int* s_slot, int* s_arow, float* s_weight, unsigned long long* bars) {
  using T = Tile<ROLE, DTYPE, ACT, BLOCK_M, BLOCK_N, STAGES>;
  constexpr int GROUPS = PINGPONG ? 2 : 1;                      // consumer groups on different tiles
  constexpr int TILE_THREADS = T::CONSUMER_THREADS;             // consumer threads of one tile
  constexpr int CONSUMERS = GROUPS * TILE_THREADS;
  static_assert(!PINGPONG || BLOCK_M == 64, "ping-pong groups are one warpgroup each");
  constexpr bool EPILOGUE_SCALED = quant_scales_in_epilogue(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;
  // Registers after setmaxnreg (two consumer warpgroups): the producer keeps its rows and their
  // addresses (24 at most: 136; fp8 block tiles, <= 128 weight rows: 16, 96), the consumers the
  // accumulators and the epilogue (176; fp8 block: a second accumulator set, 200). The CTA starts
  // with LAUNCH_REGS per thread (launch bounds: 384 threads, one CTA per SM); a consumer's
  // setmaxnreg.inc waits until the producer's .dec has returned enough of them, so what the
  // consumers gain must not exceed what the producer gives back (else it waits forever).
  constexpr int PRODUCER_REGS = BLOCK_SCALED ? 96 : 136, CONSUMER_REGS = BLOCK_SCALED ? 200 : 176;
  constexpr int LAUNCH_REGS = 65536 / 384 / 8 * 8;
  static_assert(128 * (LAUNCH_REGS - PRODUCER_REGS) >= 256 * (CONSUMER_REGS - LAUNCH_REGS),
                "the consumers' registers come from the producer's");
  static_assert(!BLOCK_SCALED || (BLOCK_M + T::B_ROWS) * 8 / 128 <= 16, "the producer's 96 registers hold 16 rows");
  static_assert(moe_wgmma_b_by_tma(true), "the persistent variant reads weight tiles by bulk tensor copies");
  constexpr bool A_TMA = moe_wgmma_a_by_tma(ROLE, true);
  const int tid = threadIdx.x;
  const unsigned smem_a = sm80::smem_addr(s_a), smem_b = smem_a + STAGES * T::A_STAGE;
  const unsigned full0 = sm80::smem_addr(bars), empty0 = full0 + STAGES * 8;  // [STAGES] each
  if (tid == 0) {
    sm90::prefetch_tensor_map(args.b_tensor_map);
    if constexpr (A_TMA) sm90::prefetch_tensor_map(args.a_tensor_map);
    for (int s = 0; s < STAGES; ++s) {
      // Arrivals per fill: thread 0's expected-bytes arrival for the boxes, plus one (async) per
      // producer thread's A copies when A comes by cp.async.
      sm90::mbar_init(full0 + s * 8, A_TMA ? 1 : 1 + 128);
      sm90::mbar_init(empty0 + s * 8, TILE_THREADS);  // one arrival per consumer thread of the tile's group
    }
    if constexpr (PINGPONG)  // turn0 + 8 g: group g may start its next k loop (the other group's arrivals)
      for (int g = 0; g < 2; ++g) sm90::mbar_init(sm80::smem_addr(bars) + (2 * STAGES + g) * 8, TILE_THREADS);
    sm90::fence_mbar_init();
  }
  __syncthreads();
  const int col_tiles = (args.n_out + BLOCK_N - 1) / BLOCK_N, row_tiles = args.totals[2];
  const int items = col_tiles * row_tiles;
  if (tid < 128) {  // producer warpgroup
    if constexpr (CONSUMERS == 256) sm90::setmaxnreg_dec<PRODUCER_REGS>();
    // Weight box g of k tile kt: the BLOCK_N weight rows of columns n0.. in set g (stacked: from n0
    // + the up rows' offset; interleaved: every second row from 2 n0 + g, the map steps by 2). Rows
    // past the expert's land as zeros; rows past n_out inside it only feed columns the epilogue
    // skips.
    auto load_weight_boxes = [&](int slot, int kt, int n0, int expert) {
#pragma unroll
      for (int g = 0; g < T::G; ++g)
        sm90::tma_load_3d(smem_b + slot * T::B_STAGE + g * BLOCK_N * kRowBytes, args.b_tensor_map, kt * kRowBytes,
                          activation_is_interleaved(ACT) ? 2 * n0 + g : n0 + g * args.up_row_offset, expert,
                          full0 + slot * 8);
    };
    int it = 0;  // k tiles produced so far: slot it % STAGES, use it / STAGES of that slot
    if constexpr (A_TMA) {
      // Every copy is one bulk tensor copy: thread 0 produces alone.
      if (tid == 0)
        for (int item = blockIdx.x; item < items; item += gridDim.x) {
          int tile, n0;
          walk_item(args, item, col_tiles, row_tiles, BLOCK_N, tile, n0);
          const int expert = args.tile_expert[tile];
          for (int i = 0; i < local_tiles; ++i, ++it) {
            const int slot = it % STAGES;
            sm90::mbar_wait(empty0 + slot * 8, ((it / STAGES) & 1) ^ 1);  // a fresh slot passes at once
            sm90::mbar_arrive_expect_tx(full0 + slot * 8, T::A_STAGE + T::B_STAGE);
            sm90::tma_load_3d(smem_a + slot * T::A_STAGE, args.a_tensor_map, (kt_begin + i) * kRowBytes,
                              tile * BLOCK_M, 0, full0 + slot * 8);
            load_weight_boxes(slot, kt_begin + i, n0, expert);
          }
        }
    } else {
      ChunkLoader<ROLE, ACT, QUANT, BLOCK_M, BLOCK_N, 128, true> loader;  // A rows only
      for (int item = blockIdx.x; item < items; item += gridDim.x) {
        int tile, n0;
        walk_item(args, item, col_tiles, row_tiles, BLOCK_N, tile, n0);
        const int expert = args.tile_expert[tile];
        loader.init(args, tile * BLOCK_M, n0, expert, tid);
        for (int i = 0; i < local_tiles; ++i, ++it) {
          const int slot = it % STAGES;
          sm90::mbar_wait(empty0 + slot * 8, ((it / STAGES) & 1) ^ 1);  // a fresh slot passes at once
          loader.issue(args, smem_a + slot * T::A_STAGE, smem_b + slot * T::B_STAGE, kt_begin + i);
          if (tid == 0) {
            sm90::mbar_arrive_expect_tx(full0 + slot * 8, T::B_STAGE);
            load_weight_boxes(slot, kt_begin + i, n0, expert);
          }
          sm90::cp_async_mbar_arrive(full0 + slot * 8);
        }
      }
    }
    sm80::cp_async_wait<0>();
  } else {  // consumer warpgroups
    if constexpr (CONSUMERS == 256) sm90::setmaxnreg_inc<CONSUMER_REGS>();
    // Group g (ping-pong) takes the CTA's items g, g + 2, ...; its thread gtid, warpgroup wg of
    // the tile (64 rows each).
    const int ctid = tid - 128, lane = tid & 31, group = PINGPONG ? ctid / TILE_THREADS : 0;
    const int gtid = ctid - group * TILE_THREADS, cwarp = gtid >> 5, wg = cwarp / 4;
    s_slot += group * BLOCK_M;  // this group's row arrays (moe_wgmma_rows_held)
    s_arow += group * BLOCK_M;
    s_weight += group * BLOCK_M;
    const unsigned turn0 = full0 + 2 * STAGES * 8;  // [2] (ping-pong)
    float acc[T::G][1][T::NI][4];
    float* d = &acc[0][0][0][0];
    float part[BLOCK_SCALED ? T::G * T::NI * 4 : 1];  // fp8 block scales: one k tile's sums
    // Per-weight-row scales (fp8 channel / tensor; not with ping-pong, whose turn barriers are here).
    static_assert(!(PINGPONG && EPILOGUE_SCALED), "ping-pong groups would need column scales of their own");
    float* s_col_scale = reinterpret_cast<float*>(s_a + STAGES * (T::A_STAGE + T::B_STAGE) + STAGES * 16);
    // The staged epilogue's own tile (StagedTile), after the column scales (the host sizes shared
    // memory with moe_wgmma_smem_bytes and refuses a staged tile that does not fit).
    static_assert(!STAGED || moe_wgmma_staging_bytes(ROLE, BLOCK_M, BLOCK_N, STAGES, T::G == 2, true) > 0,
                  "the staged tile fits beside the ring");
    static_assert(!(PINGPONG && STAGED), "ping-pong groups would need staging tiles of their own");
    unsigned char* s_out = reinterpret_cast<unsigned char*>(s_col_scale + 256);
    int it = group * local_tiles;  // the ring's k tile sequence: the CTA's items in order, local_tiles each
    // Each item's row data is fetched one item ahead, off the critical path: consumer thread gtid <
    // BLOCK_M (TILE_THREADS = 2 BLOCK_M, or BLOCK_M with ping-pong) holds row gtid's routed slot and
    // router weight, and the tile's expert. The next tile's slot loads are issued before this tile's
    // k loop, the weights (which need the slot) after it. Fetched at tile start, these two dependent
    // round trips were the top stall of GEMM2s with few k tiles (DeepSeek-V3 TP8, K = 256: 4 per tile).
    static_assert(TILE_THREADS >= BLOCK_M, "a consumer thread per tile row");
    auto fetch_slot = [&](int item, int& expert) {
      if (item >= items) return -1;
      int tile, n0;
      walk_item(args, item, col_tiles, row_tiles, BLOCK_N, tile, n0);
      expert = args.tile_expert[tile];
      return gtid < BLOCK_M ? args.gather_index[tile * BLOCK_M + gtid] : -1;
    };
    auto fetch_weight = [&](int slot) {
      return (slot >= 0 && args.topk_weights != nullptr) ? args.topk_weights[slot] : 0.f;
    };
    const int stride = GROUPS * gridDim.x;
    int expert_next = 0;
    int slot_next = fetch_slot(blockIdx.x + group * gridDim.x, expert_next);
    float weight_next = fetch_weight(slot_next);
    for (int item = blockIdx.x + group * gridDim.x, turn = 0; item < items; item += stride, ++turn) {
      int tile, n0;
      walk_item(args, item, col_tiles, row_tiles, BLOCK_N, tile, n0);
      const int expert = expert_next, row0 = tile * BLOCK_M;
      sm90::named_barrier(1 + group, TILE_THREADS);  // the previous tile's epilogue is done with the row arrays
      if (gtid < BLOCK_M) {
        s_slot[gtid] = slot_next;
        s_arow[gtid] = slot_next < 0 ? -1 : (ROLE == kRoleGemm1 ? slot_next / args.top_k : row0 + gtid);
        s_weight[gtid] = weight_next;
      }
      if constexpr (EPILOGUE_SCALED)
        column_scales<ACT, BLOCK_N, T::B_ROWS>(args, n0, expert, gtid, TILE_THREADS, s_col_scale);
      sm90::named_barrier(1 + group, TILE_THREADS);
      slot_next = fetch_slot(item + stride, expert_next);
  #pragma unroll
      for (int e = 0; e < T::G * T::NI * 4; ++e) d[e] = 0.f;
      // Ping-pong: group 1's item n follows group 0's item n, group 0's item n (n >= 1) group 1's
      // item n - 1: wait for the other group's turn-barrier phase of that item.
      if constexpr (PINGPONG)
        if (group == 1 || turn > 0) sm90::mbar_wait(turn0 + group * 8, (group == 1 ? turn : turn - 1) & 1);
      int held = -1;  // the slot whose wgmma may still run
      for (int i = 0; i < local_tiles; ++i, ++it) {
        const int slot = it % STAGES;
        float a_sc[2], b_sc[T::G];
        if constexpr (BLOCK_SCALED)  // fetched before the wait: their latency overlaps it
          block_scales<ACT, T::G>(args, s_arow, wg * 64 + (cwarp % 4) * 16 + (lane >> 2), n0, expert, kt_begin + i,
                                  a_sc, b_sc);
        sm90::mbar_wait(full0 + slot * 8, (it / STAGES) & 1);
        sm90::fence_proxy_async();  // the landed copies -> the async proxy (wgmma)
        sm90::fence();
        const unsigned long long desc_a = sm90::sw128_desc(smem_a + slot * T::A_STAGE + wg * 64 * kRowBytes);
        const unsigned long long desc_b = sm90::sw128_desc(smem_b + slot * T::B_STAGE);
        if constexpr (BLOCK_SCALED) {
          // The sums of each k tile are scaled before they join d: wait for this one, free its slot,
          // promote. The other consumer warpgroup's wgmmas keep the tensor cores busy meanwhile.
          mma_k_tile<DTYPE, QUANT, T::B_ROWS>(part, desc_a, desc_b, 0);
          sm90::commit();
          sm90::wait<0>();
          sm90::mbar_arrive(empty0 + slot * 8);
          promote_block<T::G, T::NI>(d, part, a_sc, b_sc);
        } else {
          mma_k_tile<DTYPE, QUANT, T::B_ROWS>(d, desc_a, desc_b);
          sm90::commit();
          sm90::wait<1>();
          if (held >= 0) sm90::mbar_arrive(empty0 + held * 8);
          held = slot;
        }
      }
      // Ping-pong: every wgmma of this item is issued and every `full` wait of its k tiles passed:
      // the other group's k loop may start (its first tile's fill is then at most one phase ahead).
      if constexpr (PINGPONG) sm90::mbar_arrive(turn0 + (1 - group) * 8);
      it += (GROUPS - 1) * local_tiles;  // the other group's item
      sm90::wait<0>();
      if (held >= 0) sm90::mbar_arrive(empty0 + held * 8);
      weight_next = fetch_weight(slot_next);  // lands during the epilogue
  #pragma unroll
      for (int e = 0; e < T::G * T::NI * 4; ++e) sm90::fence_operand(d[e]);
      if constexpr (STAGED) {
        // The previous tile's rows have left the staging tile (their bulk copies were issued a k
        // loop ago: the wait is normally over at once).
        if (gtid < BLOCK_M) sm90::bulk_wait_read();
        sm90::named_barrier(1, CONSUMERS);
        const StagedTile<ROLE, DTYPE, BLOCK_N> out{s_out, n0};
        moe_store::store_fragments<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, wg * 64 + (cwarp % 4) * 16, 0, lane, n0,
                                                                      expert, s_slot, s_arow, s_weight, s_col_scale, out);
        sm90::fence_proxy_async();  // the staged tile -> the copy engine
        sm90::named_barrier(1, CONSUMERS);
        // Left in flight: the copies overlap the next tile's k loop.
        if (gtid < BLOCK_M && s_slot[gtid] >= 0) out.store_row(args, row0, gtid, s_slot[gtid]);
      } else {
        moe_store::store_fragments<ROLE, DTYPE, ACT, QUANT, BLOCK_N>(args, acc, wg * 64 + (cwarp % 4) * 16, 0, lane, n0,
                                                                      expert, s_slot, s_arow, s_weight, s_col_scale,
                                                                      moe_store::DirectSink<ROLE, DTYPE>{args, row0});
      }
    }
    if constexpr (STAGED)
      if (gtid < BLOCK_M) sm90::bulk_wait_read();  // the source must outlive the CTA's shared memory
  }
}
#endif

}  // namespace moe_wgmma_detail

// Plain tiles of 128 weight rows and fewer (64 accumulators per thread) keep registers for two
// CTAs per SM, whose barriers and epilogues then overlap each other's main loops (not with fp8
// block scales: their second accumulator set needs the registers).
MOEJIT_HOST_DEVICE constexpr int moe_wgmma_min_ctas(int act, int quant, int block_n, bool persistent) {
  return !persistent && quant != kQuantFp8Block && (activation_is_gated(act) ? 2 : 1) * block_n <= 128 ? 2 : 1;
}
template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int BLOCK_N, int STAGES, int PERSISTENT, int STAGED,
          int PINGPONG>
__global__ void __launch_bounds__(moe_wgmma_threads(BLOCK_M, PERSISTENT, PINGPONG),
                                  moe_wgmma_min_ctas(ACT, QUANT, BLOCK_N, PERSISTENT))
    moe_gemm_wgmma_kernel(const __grid_constant__ MoeGemmArgs args) {
  static_assert(QUANT == kQuantNone || quant_is_fp8(QUANT), "16-bit weights or fp8 w8a8");
  static_assert(ROLE == kRoleGemm1 || ACT == kActNone, "GEMM2 has no activation");
  static_assert(!STAGED || PERSISTENT, "the plain variant always stages its tile in the idle ring");
  static_assert(!PINGPONG || PERSISTENT, "ping-pong groups are the persistent variant's");
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
    moe_wgmma_detail::persistent_tiles<ROLE, DTYPE, ACT, QUANT, BLOCK_M, BLOCK_N, STAGES, STAGED != 0, PINGPONG != 0>(
        args, s_a, kt_begin, local_tiles, s_slot, s_arow, s_weight, bars);
  } else {
    moe_wgmma_detail::plain_tile<ROLE, DTYPE, ACT, QUANT, BLOCK_M, BLOCK_N, STAGES>(args, s_a, kt_begin, local_tiles,
                                                                                   s_slot, s_arow, s_weight);
  }
#else
  __trap();  // the host builds this family for sm_90a only
#endif
}

}  // namespace moejit
