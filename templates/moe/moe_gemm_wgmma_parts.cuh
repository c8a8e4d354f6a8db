// The sm_90a wgmma GEMM path's building blocks (moe_gemm_wgmma.cuh, moe_gemm_wgmma_persistent.cuh):
// the grouped walk of work items, the cp.async chunk loader, one k tile of wgmmas, fp8 block /
// column scales, the staged epilogue tile and the tile's constants.
#pragma once

#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_gemm_store.cuh"
#include "moe/moe_tile_rows.cuh"
#include "moe/moe_tile_walk.cuh"

namespace moejit {
namespace moe_wgmma_detail {

inline constexpr int kRowBytes = 128;  // a k tile row: 64 16-bit elements, the 128-byte swizzle's width

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
  // A: this thread's chunk of each of its rows (row start + chunk * 16; a padding row's points at
  // A's first chunk, never read), found once per tile, and bit i of a_valid set for a row to copy.
  // Recomputing row * lda per row and k tile cost the persistent producer ~12 instructions a row
  // (ncu, H100, fp8_block DeepSeek-V3 TP8 M = 8192 GEMM1: the producer warps issuing ~80% of
  // their samples, the consumers waiting on `full` in ~8% of theirs).
  const unsigned char* a_chunk[A_LOADS];
  unsigned a_valid;
  int b_row[B_LOADS > 0 ? B_LOADS : 1];
  const unsigned char* b_base;  // the expert's weights + this thread's chunk
  int tid;

  // rows_valid = false: a tile past the tile map (a multicast pair's missing half): zero rows.
  __device__ void init(const MoeGemmArgs& args, int row0, int n0, int expert, int thread, bool rows_valid = true) {
    tid = thread;
    const unsigned char* a_base = static_cast<const unsigned char*>(args.a) + (tid % 8) * 16;
    a_valid = 0;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8, slot = rows_valid ? args.gather_index[row0 + r] : -1;
      const int row = moe_tile::a_row<ROLE>(args, slot, row0 + r);
      a_chunk[i] = row < 0 ? a_base : a_base + row * args.lda;
      a_valid |= (row >= 0 ? 1u : 0u) << i;
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
    const int kbytes = kt * kRowBytes;  // the k tile's offset in a row (rows are under 2 GiB)
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8;
      const bool valid = k_ok && ((a_valid >> i) & 1u);
      // A 32-bit select, then one 64-bit add: a skipped chunk reads nothing at its row's start.
      sm80::cp_async_16(sa + r * kRowBytes + (chunk ^ (r & 7)) * 16, a_chunk[i] + static_cast<unsigned>(valid ? kbytes : 0),
                        valid);
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int r = (tid + i * THREADS) / 8;
      const bool valid = k_ok && b_row[i] >= 0;
      sm80::cp_async_16(sb + r * kRowBytes + (chunk ^ (r & 7)) * 16,
                        valid ? b_base + b_row[i] * args.ldb + kbytes : b_base, valid);
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

// fp8 128 x 128 blocks: where a lane's scales are, found once per tile: the activation scale rows
// of the two accumulator rows it holds (tile rows `row` and `row` + 8; padding rows read A's first
// scale row and take 0) and the weight-row block of each of the tile's scale slots (a set's rows
// n0 .. n0 + 127, n0 + 128 .. (block_n 256: two slots a set); the host keeps each slot's rows in
// one block). load() then costs a load per scale: the per-k-tile address arithmetic (kernel
// parameters reloaded from the constant bank, 64-bit products) had been most of the consumers'
// instructions between two k tiles' wgmmas (ncu, H100, fp8_block DeepSeek-V3 TP8 GEMM1).
template <int G, int BLOCK_N>
struct BlockScales {
  static constexpr int PER_SET = BLOCK_N > 128 ? BLOCK_N / 128 : 1;  // scale blocks a set spans
  static constexpr int SLOTS = G * PER_SET;
  // Element offsets (32 bits: MoeLayer keeps activation scale counts under 2^30; weight scale
  // tensors are small): of the activation scale rows (-1: a padding row, scale 0) and of the slots'
  // weight-row blocks. Offsets rather than pointers: 64-bit ones cost the plain kernel the
  // registers of its second CTA per SM (fp8 GEMM2 128 x 64: 126 -> 133).
  int a[2];
  int b[SLOTS];
  template <int ACT>
  __device__ void init(const MoeGemmArgs& args, const int* s_arow, int row, int n0, int expert) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int arow = s_arow[row + 8 * h];
      a[h] = arow < 0 ? -1 : static_cast<int>(arow * args.a_scale_ld);
    }
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      // n0 < n_out: every set's first row is a weight row; a slot past n_out (the last column
      // tile's second half) reads its set's first block: its columns are never stored.
      const int first = moe_tile::weight_row<ACT>(args, n0, s / PER_SET);
      const int wrow = moe_tile::weight_row<ACT>(args, n0 + (s % PER_SET) * 128, s / PER_SET);
      b[s] = static_cast<int>(expert * args.b_scale_expert_stride + ((wrow < 0 ? first : wrow) >> 7) * args.b_scale_row_stride);
    }
  }
  // The scales of k tile kt.
  __device__ void load(const MoeGemmArgs& args, int kt, float (&a_sc)[2], float (&b_sc)[SLOTS]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) a_sc[h] = a[h] < 0 ? 0.f : __ldg(args.a_scale + a[h] + kt);
    const float* b_scale = static_cast<const float*>(args.b_scale);
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) b_sc[s] = __ldg(b_scale + b[s] + kt);
  }
};
// d += one k tile's sums of weight rows c * CHUNK_ROWS .. (part, waited for: the chunk's m64 x
// CHUNK_ROWS fragment) x a_scale(row) x b_scale(slot). Element e of the fragment is column
// (e / 4) * 8 + .. of the chunk, row lane / 4 (+ 8 for bit 1 of e); d holds the whole tile's
// fragment (B_ROWS / 2 elements), the chunk's from c * CHUNK_ROWS / 2 on. c is a constant of an
// unrolled loop (the indices fold; d stays in registers).
template <int G, int BLOCK_N, int CHUNK_ROWS>
__device__ inline void promote_block(float* d, float* part, const float (&a_sc)[2],
                                     const float (&b_sc)[BlockScales<G, BLOCK_N>::SLOTS], int c = 0) {
  constexpr int PER_SET = BlockScales<G, BLOCK_N>::PER_SET;
#pragma unroll
  for (int e = 0; e < CHUNK_ROWS / 2; ++e) {
    sm90::fence_operand(part[e]);
    const int n = c * CHUNK_ROWS + (e / 4) * 8;  // the weight row (tile column) of e's n8 chunk
    const int slot = n / BLOCK_N * PER_SET + n % BLOCK_N / 128;
    d[c * CHUNK_ROWS / 2 + e] += part[e] * (a_sc[(e >> 1) & 1] * b_sc[slot]);
  }
}
// d += one k tile's sums, unscaled (fp8 per channel / tensor: their scales act in the epilogue).
template <int N>
__device__ inline void promote_sum(float* d, float* part) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    sm90::fence_operand(part[e]);
    d[e] += part[e];
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

// Staged tiles with at least this many k tiles send their rows by bulk copies (StagedTile).
inline constexpr int kMoeBulkRowsMinKTiles = 128;

// Epilogue through shared memory: a finished tile staged at s_out ([BLOCK_M][PITCH] of the output
// type; PITCH = BLOCK_N + 8 spreads the fragment writes over the banks and keeps rows 16-byte
// aligned), then each row leaves whole (GEMM1: DTYPE intermediate; GEMM2 rows: fp32 or DTYPE per
// slot) by the lanes' 16-byte stores or one bulk copy, or by one bulk fp32 add into its token's
// row (the top-k sum). Fragment-order global stores and atomics cost more than the main loop of
// narrow layers: each warp instruction touched 8 rows.
template <int ROLE, int DTYPE, int BLOCK_N>
struct StagedTile {
  static constexpr bool OUT16 = moe_wgmma_out_bytes(ROLE) == 2;  // DTYPE rows, else fp32
  static constexpr int OUT_BYTES = moe_wgmma_out_bytes(ROLE);
  static constexpr int PITCH = BLOCK_N + 8;
  static constexpr bool kWholeTile = true;  // store_row copies the columns < n_out only
  unsigned char* s_out;
  int n0;
  __device__ void operator()(int rl, int col, int, float a, float b) const {
    const int at = rl * PITCH + col - n0;
    if constexpr (OUT16) *reinterpret_cast<unsigned*>(s_out + at * 2) = sm80::pack2<DTYPE>(a, b);
    else *reinterpret_cast<float2*>(s_out + at * 4) = make_float2(a, b);
  }
  // How rows leave: by the warp that staged them, 16 bytes a lane (copy_rows), or a bulk copy per
  // row (store_row), left in flight. A bulk copy takes its addresses in uniform registers, so a
  // warp's 16 row copies run one lane at a time: 23% of the consumer warps' samples in DeepSeek-V3
  // TP8's fp8 GEMM2 (ncu, H100, M = 8192, 128 x 128 DTYPE-row tiles, 2 k tiles). Behind a long k
  // loop that costs little, while the lanes' stores hold the warpgroups from the next tile's
  // wgmmas. H100 same runs, lanes' stores against bulk copies: DeepSeek-V3 TP8 fp8 / bf16 M = 8192
  // (2 / 4 k tiles) -2.5 / -1%, MXFP4 gpt-oss-120b M <= 2048 (45) -1..-1.6%, Mixtral-8x7B M = 8192
  // (224) +1..+2% in two runs, within the spread in a third. The fp32 top-k adds are always bulk
  // reductions.
  static constexpr bool kBulkOut = ROLE == kRoleGemm2Atomic;
  __device__ static bool bulk_rows(int k_tiles) { return kBulkOut || k_tiles >= kMoeBulkRowsMinKTiles; }
  // Rows rl0 .. rl0 + 15 of tile row0 (the calling warp's; routed slots s_slot[rl], < 0: padding,
  // skipped) to global memory, columns < n_out. The warp's own staging stores precede it in program
  // order (after a __syncwarp), and its loads are done when it returns: the rows may be restaged.
  __device__ void copy_rows(const MoeGemmArgs& args, int row0, int rl0, int lane, const int* s_slot) const {
    constexpr int CHUNKS = BLOCK_N * OUT_BYTES / 16;  // 16-byte chunks of a row
    static_assert(CHUNKS * 16 == BLOCK_N * OUT_BYTES && 16 * CHUNKS % 32 == 0, "whole chunks, whole warps");
    const int chunks = min(BLOCK_N, args.n_out - n0) * OUT_BYTES / 16;  // n_out is a multiple of 8
    unsigned char* c = static_cast<unsigned char*>(args.c) + static_cast<long long>(n0) * OUT_BYTES;
#pragma unroll
    for (int j = 0; j < 16 * CHUNKS / 32; ++j) {
      const int i = lane + 32 * j, rl = rl0 + i / CHUNKS, chunk = i % CHUNKS;  // [16 rows][CHUNKS]
      const int slot = s_slot[rl];
      if (slot < 0 || chunk >= chunks) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(s_out + rl * PITCH * OUT_BYTES + chunk * 16);
      const long long row = ROLE == kRoleGemm1 ? row0 + rl : slot;  // GEMM1: padded rows; GEMM2: slot rows
      *reinterpret_cast<uint4*>(c + row * args.ldc * OUT_BYTES + chunk * 16) = v;
    }
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

}  // namespace moe_wgmma_detail
}  // namespace moejit
