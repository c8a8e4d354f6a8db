// The persistent wgmma kernel's weight-only formats (int8 per channel, int4 groups, MXFP4): the
// producer warpgroup turns stored weights into the DTYPE B tile the wgmmas read.
//
// Each producer thread owns LOADS 16-byte pieces of the tile's stored rows per k tile (row r,
// piece p of its RAW_ROW bytes) for the whole work item: it copies them by cp.async into a ring of
// RAW_STAGES k tiles of its own (the pieces of one thread lie together, so a warp's reads back are
// 512 contiguous bytes and no thread waits on another's copies), RAW_STAGES - 1 k tiles ahead of
// the tile it converts; converts each piece (dequant8: 4 or 2 chunks of eight DTYPE weights) and
// stores the chunks into the ring slot in the 128-byte-swizzle layout the bulk tensor copies of
// 16-bit weights produce (chunk c of row r at c ^ (r % 8)). Scales (and int4 zero points) come one
// k tile ahead in registers. Weight rows past the output columns and k past K become zeros.
//
// Why the producers: the consumers keep the tensor cores busy; two producer warpgroups (PRODUCERS =
// 256 threads, two warps per scheduler: one alone stalled on its loads' latency) convert a 128 x
// 256-row tile's 16384 weights per k tile, four (512) a 64-row tile's (moe_wgmma_producer_threads:
// there the single consumer warpgroup's wgmmas had waited on two), and the DTYPE ring (STAGES
// slots) absorbs the raw ring's refill at each new item.
#pragma once

#include "common/mma_sm80.cuh"
#include "moe/moe_dequant.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace moe_wgmma_detail {

template <int ACT, int QUANT, int DTYPE, int BLOCK_M, int BLOCK_N, int B_ROWS, int PRODUCERS>
struct WeightDequantizer {
  static constexpr int THREADS = PRODUCERS;                            // the producer warpgroups
  static constexpr int G = activation_is_gated(ACT) ? 2 : 1;
  static constexpr int RAW_ROW = 64 * quant_weight_bits(QUANT) / 8;    // stored bytes of a row's k tile
  static constexpr int PIECES = RAW_ROW / 16;                          // 16-byte pieces per row
  static constexpr int TOTAL = B_ROWS * PIECES;                        // pieces of a k tile
  static constexpr int LOADS = (TOTAL + THREADS - 1) / THREADS;         // pieces per thread and k tile
  static constexpr int PIECE_K = 128 / quant_weight_bits(QUANT);       // weights per piece: 32 or 16
  static constexpr int CHUNKS = PIECE_K / 8;                           // 8-weight chunks per piece
  static constexpr int RAW_STAGES = moe_wgmma_raw_stages(BLOCK_M, B_ROWS, QUANT);
  static constexpr int SCALE_SETS = 4;  // k tiles whose scales are in registers (fetched 3 tiles ahead)
  static_assert(quant_dequantizes_b(QUANT), "weight-only formats");

  int wrow[LOADS];              // weight row of each piece (-1 past the output columns, -2 past the tile)
  int k_tiles[LOADS];           // the piece holds weights in k tiles [0, k_tiles) (0: never)
  long long scale_at[LOADS];    // index of the piece's scale at k tile 0 (its row's and k offset's)
  const unsigned char* src[LOADS];  // the piece's stored bytes at k tile 0 (any valid address else)
  int tid;

  __device__ static int row_of(int tid, int l) { return (tid + l * THREADS) / PIECES; }
  __device__ static int piece_of(int tid, int l) { return (tid + l * THREADS) % PIECES; }

  // Per item: each piece's source, scale index and k extent, so that the k loop adds a k tile's
  // offset and compares once instead of rebuilding addresses and bounds. These producers bound
  // the kernel (ncu: its consumers wait on `full` half their time); the per-k-tile address and
  // bound work cost 3-8% of weight-only prefill (H100, fortieth session).
  __device__ void init(const MoeGemmArgs& args, int n0, int expert, int thread) {
    tid = thread;
    const unsigned char* b_base = static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride;
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      const int r = row_of(tid, l), k0 = piece_of(tid, l) * PIECE_K;
      wrow[l] = tid + l * THREADS >= TOTAL
                    ? -2
                    : moe_tile::weight_row<ACT>(args, n0 + (G == 2 ? r % BLOCK_N : r), G == 2 ? r / BLOCK_N : 0);
      const bool row_ok = wrow[l] >= 0;
      k_tiles[l] = row_ok && k0 < args.inner ? (args.inner - k0 + 63) / 64 : 0;
      src[l] = row_ok ? b_base + static_cast<long long>(wrow[l]) * args.ldb + piece_of(tid, l) * 16 : b_base;
      // (kt * 64 + k0) >> shift == (kt * 64 >> shift) + (k0 >> shift): k0 < 64, and a group of 32
      // divides kt * 64 while one of 64 or more starts no group inside a k tile.
      scale_at[l] = row_ok ? expert * args.b_scale_expert_stride +
                                 static_cast<long long>(wrow[l] >> args.b_scale_row_shift) * args.b_scale_row_stride +
                                 (k0 >> args.b_scale_k_shift)
                           : 0;
    }
  }
  __device__ bool piece_valid(int l, int kt) const { return kt < k_tiles[l]; }
  __device__ long long scale_index(const MoeGemmArgs& args, int l, int kt) const {
    return scale_at[l] + ((kt * 64) >> args.b_scale_k_shift);
  }
  // cp.async of this thread's pieces of k tile kt into raw ring slot (raw + slot's offset).
  __device__ void issue(unsigned raw, int kt) const {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      if (LOADS * THREADS > TOTAL && wrow[l] == -2) continue;  // no piece of the tile
      const bool valid = piece_valid(l, kt);
      sm80::cp_async_16(raw + (l * THREADS + tid) * 16, valid ? src[l] + kt * RAW_ROW : src[l], valid);
    }
  }
  // The scales of k tile kt's pieces (int4: DTYPE bits | zero point << 16), fetched SCALE_SETS - 1
  // k tiles ahead: one tile's conversion is shorter than an L2 round trip.
  __device__ void fetch_scales(const MoeGemmArgs& args, int kt, unsigned (&scale_next)[LOADS]) const {
    if constexpr (QUANT != kQuantInt8Channel) {  // int8: per-row scales in the epilogue
#pragma unroll
      for (int l = 0; l < LOADS; ++l) {
        const bool valid = piece_valid(l, kt);
        if constexpr (quant_is_mxfp4(QUANT)) {
          // The byte stays unread until the conversion, three k tiles on: the load's latency hides.
          scale_next[l] = 0u;
          if (!valid) continue;
          scale_next[l] = __ldg(static_cast<const unsigned char*>(args.b_scale) + scale_index(args, l, kt));
        } else {  // int4: the DTYPE scale, and the zero point (8 without per-group zero points)
          // Combined here, so the loads are waited for here anyway: no branch around them (a piece
          // outside the weights reads index 0, always there, and keeps 0). H100: Qwen3-30B-A3B
          // M = 1024 / 8192 -7.5 / -2.2% (the same shape for MXFP4, whose loads are waited for
          // three k tiles later only, cost +7..+17%: the select waits at once).
          const long long si = valid ? scale_index(args, l, kt) : 0;
          const unsigned zero = args.b_zero ? __ldg(args.b_zero + si) : 8u;
          const unsigned v = __ldg(static_cast<const unsigned short*>(args.b_scale) + si) | (zero << 16);
          scale_next[l] = valid ? v : 0u;
        }
      }
    }
  }
  // Raw slot -> DTYPE B tile at sb (swizzled); uses the scales fetched for this k tile. The MXFP4
  // scale's folded or exact way is chosen once per piece, not per chunk: per-chunk tests and their
  // divergence bookkeeping were a fifth of the producers' instructions. Pieces past K or the output
  // columns take the same path (below), one branch less per piece: -1.2 .. -3.4% on MXFP4 / int4 /
  // int8 prefill (H100, fortieth session).
  __device__ void convert(unsigned raw, unsigned sb, const unsigned (&scale)[LOADS]) const {
#pragma unroll
    for (int l = 0; l < LOADS; ++l) {
      if (LOADS * THREADS > TOTAL && wrow[l] == -2) continue;
      const int r = row_of(tid, l), p = piece_of(tid, l);
      const unsigned row = sb + r * 128;
      auto store = [&](int h, const uint4& v) {
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(row + (((p * CHUNKS + h) ^ (r & 7)) * 16)),
                     "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
      };
      // A piece past K or the output columns needs no branch: issue() zero-filled its raw bytes and
      // fetch_scales() gave it scale 0, and zero codes decode to zero in every format.
      uint4 bytes;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(bytes.x), "=r"(bytes.y), "=r"(bytes.z), "=r"(bytes.w)
                   : "r"(raw + (l * THREADS + tid) * 16));
      const unsigned word[4] = {bytes.x, bytes.y, bytes.z, bytes.w};
      if constexpr (quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16) {
        // One multiply by 2^(s - 1) where the scale allows (dequant8's exact way else).
        if (dequant::mxfp4_bf16_factor_fits(scale[l])) {
          const unsigned factor = dequant::mxfp4_bf16_factor(scale[l]);
#pragma unroll
          for (int h = 0; h < CHUNKS; ++h) store(h, dequant::mxfp4x8_bf16_scaled<QUANT>(word[h], factor));
        } else {
          const float s = dequant::e8m0_to_float(scale[l]);
#pragma unroll
          for (int h = 0; h < CHUNKS; ++h) store(h, dequant::dequant8<QUANT, DTYPE>(word[h], 0u, s, 0.f));
        }
      } else if constexpr (quant_is_mxfp4(QUANT)) {
        const float s = dequant::e8m0_to_float(scale[l]);
#pragma unroll
        for (int h = 0; h < CHUNKS; ++h) store(h, dequant::dequant8<QUANT, DTYPE>(word[h], 0u, s, 0.f));
      } else if constexpr (QUANT == kQuantInt4Group) {
        const float s = sm80::to_float<DTYPE>(static_cast<unsigned short>(scale[l] & 0xffffu));
        const float z = static_cast<float>(scale[l] >> 16);
#pragma unroll
        for (int h = 0; h < CHUNKS; ++h) store(h, dequant::dequant8<QUANT, DTYPE>(word[h], 0u, s, z));
      } else {  // int8: exact in DTYPE; its scale comes in the epilogue
#pragma unroll
        for (int h = 0; h < CHUNKS; ++h) store(h, dequant::dequant8<QUANT, DTYPE>(word[2 * h], word[2 * h + 1], 1.f, 0.f));
      }
    }
  }
};

}  // namespace moe_wgmma_detail
}  // namespace moejit
