// moe_gemm, swap-AB decode path (sm_80+): the grouped GEMM of moe_gemm_sm80.cuh for tiles of few
// tokens (BLOCK_M = 8, 16 or 32). The weights are the mma's A operand (16 weight rows per warp fill
// its M side) and the tile's tokens its N side (BLOCK_M / 8 n8 fragments). The weights go from
// global memory straight into registers (16-byte loads, STAGES k blocks in flight per warp), are
// dequantized there and fed to mma.sync: no shared-memory round trip and no barrier in the k loop,
// which is what bounds the shared-memory path for decode (4-bit weights above all).
//
// k order. mma m16n8k16 gives lane (g = lane / 4, t = lane % 4) the A elements of rows g and g + 8
// at k slots {2t, 2t+1, 2t+8, 2t+9}, and the B elements of column g at the same slots. A dot
// product does not care in which order its k are visited as long as A and B agree, so lane t reads
// CHUNK_K consecutive weights of each of its two rows with one 16-byte load (k = kb + t * CHUNK_K
// + j) and the activations of the same k; step s of the block feeds slots {2t, 2t+1} with
// j = 4s, 4s+1 and slots {2t+8, 2t+9} with j = 4s+2, 4s+3. A block is KB = 4 * CHUNK_K consecutive
// k of 16 weight rows: 64 stored bytes per row, whatever the format.
//
// Rows of a warp: gated GEMM1 -> rows g (gate) and g + 8 (up) of output column n0 + 8 * wn + g, so
// the epilogue pairs them in registers; otherwise output columns n0 + 16 * wn + g and + 8.
// Warps: WARPS_N along the output columns times WARPS_K along k (block b goes to warp b % WARPS_K);
// the WARPS_K partial sums are added in warp order through shared memory (deterministic). Grid:
// (column tiles of BLOCK_N, row tiles, k splits); k splits (grid z > 1) only for the atomic GEMM2.
//
// The order of each sum over k differs from moe_gemm_sm80.cuh's, so a row's result depends on
// which path ran: the host uses this path in the fast reduce mode only.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/mma_sm80.cuh"
#include "moe/activations.cuh"
#include "moe/moe_dequant.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace swap_ab_detail {

// 16 bytes of weights that are read once: not kept in L1.
__device__ inline uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One k block of one lane as loaded: LOADS x 16 stored bytes of rows g and g + 8, and their scale
// and zero-point bits (4-bit formats: one scale group covers the lane's 32 k).
template <int LOADS>
struct LaneBlock {
  uint4 w[2][LOADS];
  unsigned scale[2];
  unsigned zero[2];
};

// Eight e4m3 bytes (k ascending: lo then hi) -> four f16 pairs, exactly (sm_89+).
__device__ inline uint4 e4m3x8_to_f16(unsigned lo, unsigned hi) {
  uint4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 a, b, c, d;\nmov.b32 {a, b}, %4;\nmov.b32 {c, d}, %5;\n"
      "cvt.rn.f16x2.e4m3x2 %0, a;\ncvt.rn.f16x2.e4m3x2 %1, b;\n"
      "cvt.rn.f16x2.e4m3x2 %2, c;\ncvt.rn.f16x2.e4m3x2 %3, d;\n}\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "r"(lo), "r"(hi));
#else
  r = make_uint4(0u, 0u, 0u, 0u);  // not instantiated below sm_89 (the family refuses)
  (void)lo, (void)hi;
#endif
  return r;
}

}  // namespace swap_ab_detail

template <int ROLE, int DTYPE, int ACT, int QUANT, int BLOCK_M, int WARPS_N, int WARPS_K, int STAGES>
__global__ void __launch_bounds__(WARPS_N* WARPS_K * 32, 1) moe_gemm_swap_ab_kernel(const MoeGemmArgs args) {
  using namespace swap_ab_detail;
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr int BITS = quant_weight_bits(QUANT);
  constexpr int KB = moe_swap_ab_block_k();             // k per block: 32 per lane
  constexpr int K_PER_LOAD = moe_swap_ab_load_k(QUANT);  // weights per 16-byte load
  constexpr int LOADS = 32 / K_PER_LOAD;                 // 16-byte loads per row and lane
  constexpr int ROW_BYTES = KB * BITS / 8;               // stored bytes of a row per block
  constexpr int NF = BLOCK_M / 8;                      // n8 fragments (tokens)
  constexpr int BLOCK_N = moe_swap_ab_block_n(WARPS_N, GATED);  // the host sizes the grid with it
  constexpr int THREADS = WARPS_N * WARPS_K * 32;
  // w8a8 e4m3: weights and the (pre-quantized) activations both become f16 in registers (exact)
  // for an f16 mma with fp32 sums: the same products as an e4m3 mma, which sm_90 emulates anyway.
  constexpr bool FP8 = quant_is_fp8(QUANT);
  constexpr bool BLOCK_SCALED = QUANT == kQuantFp8Block;  // 128 x 128 blocks: one per k block
  constexpr bool SCALED_GROUPS = BITS == 4 || BLOCK_SCALED;  // scales loaded per k block
  constexpr int EB = quant_activation_bytes(QUANT);  // bytes per activation element
  constexpr int MMA_DTYPE = FP8 ? kDTypeF16 : DTYPE;
  static_assert(!FP8 || KB == kQuantFp8BlockSize, "a k block is one fp8 scale block");
  static_assert(K_PER_LOAD * BITS == 128 && LOADS * K_PER_LOAD == 32, "whole 16-byte loads per lane chunk");
  static_assert(BLOCK_M % 8 == 0 && NF >= 1 && NF <= 4, "BLOCK_M is 8, 16, 24 or 32");
  static_assert(STAGES >= 1 && STAGES <= 8, "1..8 k blocks in flight");

  pdl::wait();
  pdl::launch_dependents();
  const int tile = blockIdx.y;
  if (tile >= args.totals[2]) return;
  const int n0 = blockIdx.x * BLOCK_N;
  const int expert = args.tile_expert[tile];
  const int row0 = tile * BLOCK_M;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
  const int g = lane >> 2, t = lane & 3;

  __shared__ int s_slot[BLOCK_M];  // token * top_k + slot, -1 = padding row
  __shared__ int s_arow[BLOCK_M];  // row of A to read, -1 = zeros
  __shared__ float s_weight[BLOCK_M];
  __shared__ float s_partial[WARPS_K > 1 ? WARPS_K - 1 : 1][WARPS_N][NF * 4][32];  // warps wk >= 1
  static_assert(sizeof(s_slot) + sizeof(s_arow) + sizeof(s_weight) + sizeof(s_partial) ==
                    moe_swap_ab_static_smem_bytes(BLOCK_M, WARPS_N, WARPS_K),
                "the host checks shared memory with moe_swap_ab_static_smem_bytes");
  moe_tile::stage_rows<ROLE, BLOCK_M, THREADS>(args, row0, s_slot, s_arow, s_weight);

  // This lane's two weight rows (-1 past the output columns: they read row 0 and are never stored).
  int wrow[2], col[2];
  if constexpr (GATED) {
    col[0] = col[1] = n0 + wn * 8 + g;
    wrow[0] = moe_tile::weight_row<ACT>(args, col[0], 0);
    wrow[1] = moe_tile::weight_row<ACT>(args, col[0], 1);
  } else {
    col[0] = n0 + wn * 16 + g;
    col[1] = col[0] + 8;
    wrow[0] = moe_tile::weight_row<ACT>(args, col[0], 0);
    wrow[1] = moe_tile::weight_row<ACT>(args, col[1], 0);
  }

  // k blocks of this CTA (its split) and of this warp: b = b_begin + wk, + WARPS_K, ...; lane t
  // reads k [b * KB + 32t, +32) of each block, loads past k_limit read nothing (zeros).
  const int blocks = (args.inner + KB - 1) / KB;
  const int per_split = args.k_tiles_per_split > 0 ? args.k_tiles_per_split : blocks;
  const int b_begin = blockIdx.z * per_split;
  const int b_end = min(blocks, b_begin + per_split);
  const int b_first = b_begin + wk;
  // The ring turn's first block and this lane's k left from it (pointers below follow it).
  int b_base = b_first;
  int k_left = args.inner - (b_first * KB + t * 32);

  // Pointers at block b_first; the ring reads block b_first + i * WARPS_K at compile-time offsets.
  constexpr int kScaleBytes = QUANT == kQuantInt4Group ? 2 : BLOCK_SCALED ? 4 : 1;
  const unsigned char* w_ptr[2];
  const unsigned char* scale_ptr[2];  // 4-bit formats: this lane's scale of its row at b_first
  const unsigned char* zero_ptr[2];
  const int k_first = b_first * KB + t * 32;
  const int scale_step = (WARPS_K * KB) >> args.b_scale_k_shift;  // scales per ring step
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = wrow[h] < 0 ? 0 : wrow[h];
    w_ptr[h] = static_cast<const unsigned char*>(args.b) + expert * args.b_expert_stride + row * args.ldb +
               static_cast<long long>(k_first) * BITS / 8;
    const long long si = expert * args.b_scale_expert_stride + (row >> args.b_scale_row_shift) * args.b_scale_row_stride +
                         (k_first >> args.b_scale_k_shift);
    scale_ptr[h] = SCALED_GROUPS ? static_cast<const unsigned char*>(args.b_scale) + si * kScaleBytes : nullptr;
    zero_ptr[h] = args.b_zero ? args.b_zero + si : nullptr;
  }
  // Activations: this lane's 32 k of each n8 fragment's token; padding rows read the tile's first
  // row (a routed row: tiles start with one) and are never stored.
  const unsigned char* a_ptr[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    const int arow = s_arow[f * 8 + g] >= 0 ? s_arow[f * 8 + g] : s_arow[0];
    a_ptr[f] = static_cast<const unsigned char*>(args.a) + arow * args.lda + static_cast<long long>(k_first) * EB;
  }

  // fp8 blocks: the A rows of this lane's accumulator columns (tokens 2t, 2t + 1 of each fragment).
  int a_row[BLOCK_SCALED ? NF : 1][2];
  if constexpr (BLOCK_SCALED) {
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = s_arow[f * 8 + 2 * t + j];
        a_row[f][j] = r >= 0 ? r : s_arow[0];
      }
  }

  // Block b_base + i * WARPS_K (i is a compile-time step when unrolled).
  auto load_block = [&](int i) {
    LaneBlock<LOADS> v;
    const int kb = i * WARPS_K * KB;  // k of the block relative to the turn's
    const bool in_block = b_base + i * WARPS_K < b_end;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int l = 0; l < LOADS; ++l) {
        const bool valid = in_block && kb + l * K_PER_LOAD < k_left;
        v.w[h][l] = valid ? load_stream(w_ptr[h] + static_cast<long long>(i) * WARPS_K * ROW_BYTES + l * 16)
                          : make_uint4(0u, 0u, 0u, 0u);
      }
      v.scale[h] = 0u;
      v.zero[h] = 8u;
      if constexpr (SCALED_GROUPS) {
        // fp8 blocks: every lane needs its row's block scale (the mma sums all four lanes' k).
        if (in_block && (BLOCK_SCALED || kb < k_left)) {
          if constexpr (QUANT == kQuantInt4Group)
            v.scale[h] = __ldg(reinterpret_cast<const unsigned short*>(scale_ptr[h]) + i * scale_step);
          else if constexpr (BLOCK_SCALED)
            v.scale[h] = __float_as_uint(__ldg(reinterpret_cast<const float*>(scale_ptr[h]) + i * scale_step));
          else
            v.scale[h] = __ldg(scale_ptr[h] + i * scale_step);
          if (zero_ptr[h]) v.zero[h] = __ldg(zero_ptr[h] + i * scale_step);
        }
      }
    }
    return v;
  };

  float acc[NF][4];
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[f][e] = 0.f;

  // Eight weights (four DTYPE pairs) of group q (k 8q .. 8q + 7 of the lane's chunk) of row h.
  auto dequant_group = [&](const LaneBlock<LOADS>& v, int h, int q, bool exact_mxfp4) {
    const uint4 raw = v.w[h][q * 8 / K_PER_LOAD];
    const unsigned word[4] = {raw.x, raw.y, raw.z, raw.w};
    if constexpr (QUANT == kQuantNone) {
      return raw;
    } else if constexpr (QUANT == kQuantMxfp4 && DTYPE == kDTypeBF16) {
      if (!exact_mxfp4) return dequant::mxfp4x8_bf16_scaled(word[q], dequant::mxfp4_bf16_factor(v.scale[h]));
      return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, dequant::e8m0_to_float(v.scale[h]), 0.f);
    } else if constexpr (QUANT == kQuantMxfp4) {
      return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, dequant::e8m0_to_float(v.scale[h]), 0.f);
    } else if constexpr (QUANT == kQuantInt4Group) {
      return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, sm80::to_float<DTYPE>(static_cast<unsigned short>(v.scale[h])),
                                              static_cast<float>(v.zero[h]));
    } else if constexpr (FP8) {  // e4m3 -> f16, group q is half q % 2 of load q / 2
      return e4m3x8_to_f16(word[2 * (q % 2)], word[2 * (q % 2) + 1]);
    } else {  // int8: as fp8
      return dequant::dequant8<QUANT, DTYPE>(word[2 * (q % 2)], word[2 * (q % 2) + 1], 1.f, 0.f);
    }
  };

  auto compute_block = [&](const LaneBlock<LOADS>& v, int i) {
    const int kb = i * WARPS_K * KB;  // relative to the turn's
    // Activations of the chunk for each token, 8 k per load (zeros past the end: 0 * a
    // non-finite weight would otherwise poison the sum).
    constexpr int X_LOADS = 32 * EB / 16;
    uint4 xr[NF][X_LOADS];
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int l = 0; l < X_LOADS; ++l)
        xr[f][l] = kb + l * (16 / EB) < k_left
                       ? __ldg(reinterpret_cast<const uint4*>(a_ptr[f] + static_cast<long long>(kb) * EB) + l)
                       : make_uint4(0u, 0u, 0u, 0u);
    // Eight activations (four MMA_DTYPE pairs) of group q for fragment f.
    auto x_group = [&](int f, int q) {
      if constexpr (FP8) {
        const uint4 r = xr[f][q / 2];
        return q % 2 ? e4m3x8_to_f16(r.z, r.w) : e4m3x8_to_f16(r.x, r.y);
      } else {
        return xr[f][q];
      }
    };
    // fp8 blocks: this block's sums apart, then times the token's and the row's block scales.
    float part[NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[f][e] = 0.f;
    float (&sums)[NF][4] = BLOCK_SCALED ? part : acc;
    // Scales above 2 (and NaN) make the folded MXFP4 multiply overflow: the block goes the exact way.
    bool exact_mxfp4 = false;
    if constexpr (QUANT == kQuantMxfp4 && DTYPE == kDTypeBF16)
      exact_mxfp4 = __any_sync(0xffffffffu, !dequant::mxfp4_bf16_factor_fits(v.scale[0]) ||
                                                !dequant::mxfp4_bf16_factor_fits(v.scale[1]));
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 p0 = dequant_group(v, 0, q, exact_mxfp4), p1 = dequant_group(v, 1, q, exact_mxfp4);
      const unsigned a0[4] = {p0.x, p1.x, p0.y, p1.y};  // step 2q: k 8q + 0..3
      const unsigned a1[4] = {p0.z, p1.z, p0.w, p1.w};  // step 2q + 1: k 8q + 4..7
#pragma unroll
      for (int f = 0; f < NF; ++f) {
        const uint4 x = x_group(f, q);
        sm80::mma_16816<MMA_DTYPE>(sums[f], a0, x.x, x.y);
        sm80::mma_16816<MMA_DTYPE>(sums[f], a1, x.z, x.w);
      }
    }
    if constexpr (BLOCK_SCALED) {
      const int block = b_base + i * WARPS_K;
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float a_sc = __ldg(args.a_scale + a_row[f][j] * args.a_scale_ld + block);
#pragma unroll
          for (int h = 0; h < 2; ++h) acc[f][2 * h + j] += part[f][2 * h + j] * (a_sc * __uint_as_float(v.scale[h]));
        }
    }
  };

  // Register ring: STAGES blocks in flight; each consumed slot is refilled with the block STAGES
  // further on before the consumed one is computed, so loads stay in flight through the math.
  {
    LaneBlock<LOADS> ring[STAGES];
#pragma unroll
    for (int s = 0; s < STAGES; ++s) ring[s] = load_block(s);
    for (; b_base < b_end;) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        const LaneBlock<LOADS> cur = ring[s];
        ring[s] = load_block(s + STAGES);
        if (b_base + s * WARPS_K < b_end) compute_block(cur, s);
      }
      // Advance to the next ring turn.
      const int turn = STAGES * WARPS_K;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w_ptr[h] += static_cast<long long>(turn) * ROW_BYTES;
        if constexpr (SCALED_GROUPS) {
          scale_ptr[h] += kScaleBytes * STAGES * scale_step;
          if (zero_ptr[h]) zero_ptr[h] += STAGES * scale_step;
        }
      }
#pragma unroll
      for (int f = 0; f < NF; ++f) a_ptr[f] += static_cast<long long>(turn) * KB * EB;
      b_base += turn;
      k_left -= turn * KB;
    }
  }

  // Sum the WARPS_K partial sums in warp order.
  if constexpr (WARPS_K > 1) {
    if (wk > 0)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_partial[wk - 1][wn][f * 4 + e][lane] = acc[f][e];
    __syncthreads();
    if (wk > 0) return;
#pragma unroll
    for (int w = 0; w < WARPS_K - 1; ++w)
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[f][e] += s_partial[w][wn][f * 4 + e][lane];
  }

  // Epilogue: acc[f][h * 2 + j] is row g + 8h, token f * 8 + 2t + j.
  float row_scale[2] = {1.f, 1.f};  // int8 / fp8 per-channel (or per-tensor) weight scales
  if constexpr (quant_scales_in_epilogue(QUANT)) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row_scale[h] = wrow[h] < 0 ? 0.f
                                 : static_cast<const float*>(args.b_scale)[expert * args.b_scale_expert_stride +
                                                                           (wrow[h] >> args.b_scale_row_shift) *
                                                                               args.b_scale_row_stride];
  }
  const float* bias = args.bias && (ROLE == kRoleGemm1 || blockIdx.z == 0) ? args.bias + expert * args.bias_expert_stride
                                                                           : nullptr;
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int rl = f * 8 + 2 * t + j;
      const int slot = s_slot[rl];
      if (slot < 0) continue;
      const float w = s_weight[rl];
      // fp8 per token / per tensor: the token's activation scale.
      const float token_scale = (quant_scales_in_epilogue(QUANT) && FP8) ? args.a_scale[s_arow[rl] * args.a_scale_ld] : 1.f;
      float v[2] = {acc[f][j] * (row_scale[0] * token_scale), acc[f][2 + j] * (row_scale[1] * token_scale)};
      if constexpr (ROLE == kRoleGemm1) {
        unsigned short* c_row = static_cast<unsigned short*>(args.c) + (row0 + rl) * args.ldc;
        if (args.weight_on_input) v[0] *= w, v[1] *= w;
        if (bias) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (wrow[h] >= 0) v[h] += bias[wrow[h]];
        }
        if constexpr (GATED) {
          if (col[0] < args.n_out) c_row[col[0]] = sm80::from_float<DTYPE>(act::gated<ACT>(v[0], v[1], args.alpha, args.limit));
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (col[h] < args.n_out) c_row[col[h]] = sm80::from_float<DTYPE>(act::single<ACT>(v[h]));
        }
      } else {
        float* c = static_cast<float*>(args.c);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (col[h] >= args.n_out) continue;
          if (bias) v[h] += bias[col[h]];
          if (args.weight_on_output) v[h] *= w;
          if constexpr (ROLE == kRoleGemm2Rows) c[slot * args.ldc + col[h]] = v[h];
          else atomicAdd(c + (slot / args.top_k) * args.ldc + col[h], v[h]);
        }
      }
    }
}

}  // namespace moejit
