// Pieces of the swap-AB decode kernel (moe_gemm_swap_ab.cuh): a lane's landed k block and its
// dequantization (the e4m3 conversion among them), the predicated activation load, its wgmma
// variant's activation staging and register-A warpgroup MMA (sm_90a), and the tile's epilogue.
#pragma once

#include "common/mma_sm80.cuh"
#include "common/wgmma_sm90.cuh"
#include "moe/activations.cuh"
#include "moe/moe_dequant.cuh"
#include "moe/moe_gemm_args.cuh"
#include "moe/moe_tile_rows.cuh"

namespace moejit {
namespace swap_ab_detail {

// The scale and zero-point bits of one k block of one lane's rows g and g + 8 (4-bit formats: one
// scale group covers the lane's 32 k; fp8 blocks: the row's 128 x 128 block).
struct LaneScales {
  unsigned scale[2];
  unsigned zero[2];
};

// One k block of one lane as landed: LOADS x 16 stored bytes of rows g and g + 8, their scales, and
// X_LOADS x 16 bytes of activations (the lane's 32 k) of each token fragment's token g.
template <int LOADS, int NF, int X_LOADS>
struct LaneBlock {
  uint4 w[2][LOADS];
  uint4 x[NF][X_LOADS];
  LaneScales scales;
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

// Eight weights of a landed block as four DTYPE pairs (f16 for fp8): group q (k 8q .. 8q + 7 of
// the lane's chunk) of row h. MXFP4 into bf16 scales by exponent arithmetic unless `exact_mxfp4`
// (a scale whose factor does not fit: the float path).
template <int QUANT, int DTYPE, int K_PER_LOAD, int LOADS, int NF, int X_LOADS>
__device__ inline uint4 dequant_group(const LaneBlock<LOADS, NF, X_LOADS>& v, int h, int q, bool exact_mxfp4) {
  const uint4 raw = v.w[h][q * 8 / K_PER_LOAD];
  const unsigned word[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (QUANT == kQuantNone) {
    return raw;
  } else if constexpr (quant_is_mxfp4(QUANT) && DTYPE == kDTypeBF16) {
    if (!exact_mxfp4) return dequant::mxfp4x8_bf16_scaled<QUANT>(word[q], dequant::mxfp4_bf16_factor(v.scales.scale[h]));
    return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, dequant::e8m0_to_float(v.scales.scale[h]), 0.f);
  } else if constexpr (quant_is_mxfp4(QUANT)) {
    return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, dequant::e8m0_to_float(v.scales.scale[h]), 0.f);
  } else if constexpr (QUANT == kQuantInt4Group) {
    return dequant::dequant8<QUANT, DTYPE>(word[q], 0u, sm80::to_float<DTYPE>(static_cast<unsigned short>(v.scales.scale[h])),
                                            static_cast<float>(v.scales.zero[h]));
  } else if constexpr (quant_is_fp8(QUANT)) {  // e4m3 -> f16, group q is half q % 2 of load q / 2
    return e4m3x8_to_f16(word[2 * (q % 2)], word[2 * (q % 2) + 1]);
  } else {  // int8: as fp8
    return dequant::dequant8<QUANT, DTYPE>(word[2 * (q % 2)], word[2 * (q % 2) + 1], 1.f, 0.f);
  }
}

// A 16-byte read-only load that leaves `v` as it was where `live` is false: no request and no
// zeroing. For a padding token's activations, which reach only that token's accumulator column
// (column g of the mma's B, never stored). GEMM2 reads GEMM1's intermediate, written while GEMM2
// already runs (programmatic dependent launch): there the load is coherent (no .nc, which lets the
// compiler treat the data as constant for the whole kernel), and volatile with a memory clobber, so
// that nothing moves it above pdl::wait(). With .nc loads issued right after the wait (the
// activations one block ahead, below), 32-token MXFP4 tiles of the GPU test read NaN from the
// poisoned workspace now and then; never with CUDA_LAUNCH_BLOCKING=1.
#define MOEJIT_LDG16_IF(CACHE)                                                                         \
  asm volatile("{\n.reg .pred q;\nsetp.ne.b32 q, %5, 0;\n@q ld.global" CACHE ".v4.u32 {%0, %1, %2, %3}, [%4];\n}\n" \
               : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)                                                 \
               : "l"(p), "r"(static_cast<int>(live))                                                        \
               : "memory")
template <bool INVARIANT>
__device__ inline void ldg16_if(uint4& v, const void* p, bool live) {
  if constexpr (INVARIANT) MOEJIT_LDG16_IF(".nc");
  else MOEJIT_LDG16_IF("");
}
#undef MOEJIT_LDG16_IF

// A 16-byte activation load: read-only data (INVARIANT: X in GEMM1, or GEMM2's intermediate after
// griddepcontrol.wait, as before the handover existed) by the non-coherent path; GEMM2's
// intermediate under the per-tile handover (common/tile_flags.cuh), written by a kernel that may
// still run, by a plain coherent load, which the compiler keeps below the barrier after the wait
// (an .nc load may be hoisted above it: the data is read-only for the kernel's life as far as the
// compiler knows).
template <bool INVARIANT>
__device__ inline uint4 ldg16(const void* p) {
  if constexpr (INVARIANT) return __ldg(static_cast<const uint4*>(p));
  else return *static_cast<const uint4*>(p);
}

// A barrier of the first THREADS threads of the CTA (the warps that store a swap-AB tile: those of
// wk = 0 are the first WARPS_N), named 1 so that it never meets __syncthreads' barrier 0.
template <int THREADS>
__device__ inline void storers_barrier() {
  asm volatile("bar.sync 1, %0;" ::"r"(THREADS) : "memory");
}


// The wgmma variant (WGMMA = 1). The tile's tokens are the B operand, staged per k block in shared
// memory in two 64-k halves of [BLOCK_M rows][128 bytes] with the 128-byte swizzle (16-byte chunk c
// of row n at c ^ (n % 8)), in the lanes' k order: the mma reads k slot 2t + e of step s (and 2t + 8
// + e) from lane t's lane-local element j = 4s + e (4s + 2 + e), so logical k 16s + 8h + 2t + e holds
// the activation at the lane's j = 4s + 2h + e. A lane's 16-byte activation load l (j = 8l .. 8l + 7)
// therefore lands as four 4-byte words, word i at chunk 4l + i, byte 4t of the row: the 32 lanes of a
// warp (rows g, bytes 4t) write 128 contiguous banks' worth (conflict-free). ncu (H100, gpt-oss-120b
// MXFP4 M = 512, 32 tokens) has 37% of the stall cycles on these loads (one block ahead). Copying the
// words instead by 4-byte cp.async STAGES blocks ahead (no registers; STAGES + 1 stages) ran slower:
// gpt-oss-120b M = 384 / 512 / 768 1088 / 1129 / 1213 -> 1247 / 1334 / 1559 us, int4 Qwen3 M = 256
// 269 -> 287 (same run, two rounds): four copy instructions a lane and L1 round trips per 16 bytes.
__device__ inline void sts32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// Every thread's stores of a stage made visible to the tensor cores (async proxy), then a CTA barrier.
__device__ inline void wgmma_stage_publish() {
#if MOEJIT_HAS_WGMMA
  sm90::fence_proxy_async();
#endif
  __syncthreads();
}
// Shared-memory bytes of one staged k block of BLOCK_M tokens (both halves). Two stages: block b
// reads stage b % 2 while its successor's activations land in the other, last read by block b - 1's
// warpgroup MMAs, which every warpgroup waited for (wgmma_block) before the barrier that ended block
// b - 1.
__device__ constexpr int wgmma_stage_bytes(int block_m) { return 2 * block_m * 128; }
inline constexpr int kWgmmaStages = 2;
// Where word i of a lane's load l of token n lands, relative to the stage: half l / 2, chunk
// (4 (l % 2) + i) ^ (n % 8) of row n, byte 4t.
__device__ inline unsigned wgmma_stage_offset(int block_m, int n, int l, int t) {
  return static_cast<unsigned>((l / 2) * block_m * 128 + n * 128 + 4 * t);
}
__device__ inline unsigned wgmma_stage_chunk_key(int n, int l) { return static_cast<unsigned>((4 * (l % 2)) ^ (n % 8)); }
__device__ inline void wgmma_stage_store(unsigned stage, unsigned offset, unsigned key, const uint4& v) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) sts32(stage + offset + ((key ^ static_cast<unsigned>(i)) << 4), w[i]);
}

// One k block (8 steps of k16) of a warpgroup: D[64 x N] += A (this warp's 16 rows: a[s], the
// mma.m16n8k16 A fragment of step s) x the staged tokens' block^T, then waits for it, so that the
// caller may write a again and read D. 16-bit A (BF16: bf16, else f16). Measured (H100, gpt-oss-20b
// MXFP4, 16 / 32 tokens a tile): leaving a block's MMAs in flight under the next block's
// dequantization (a second set of A fragments, or one per 64-k half) took 32-60 more registers and
// halved the CTAs an SM: 328 -> 336-445 / 377 -> 626 us.
template <int N, bool BF16>
__device__ inline void wgmma_block(float* acc, const unsigned (&a)[8][4], unsigned stage) {
#if MOEJIT_HAS_WGMMA
  sm90::fence();
#pragma unroll
  for (int s = 0; s < 8; ++s)
    sm90::mma_rs_m64k16<N, BF16>(acc, a[s], sm90::sw128_desc(stage + (s / 4) * N * 128) + 2 * (s % 4), 1);
  sm90::commit();
  sm90::wait<0>();
#else
  (void)acc, (void)a, (void)stage;
  __trap();  // not instantiated without wgmma (the family refuses)
#endif
}

// The tile's epilogue: acc[f][h * 2 + j] is weight row g + 8h (wrow[h], output column col[h]; < 0:
// none), token f * 8 + 2t + j of the tile (s_slot / s_arow: its routed slot and A row, < 0:
// padding). Weight and token scales, bias, router weight and activation, then the store (GEMM1:
// DTYPE intermediate row; GEMM2: fp32 or DTYPE slot row, or an atomic add into the token's row).
template <int ROLE, int DTYPE, int ACT, int QUANT, int NF>
__device__ inline void store_tile(const MoeGemmArgs& args, const float (&acc)[NF][4], const int (&wrow)[2],
                                  const int (&col)[2], const int* s_slot, const int* s_arow, int row0, int expert,
                                  int t) {
  constexpr bool GATED = activation_is_gated(ACT);
  constexpr bool FP8 = quant_is_fp8(QUANT);
  float row_scale[2] = {1.f, 1.f};  // int8 / fp8 per-channel (or per-tensor) weight scales
  if constexpr (quant_scales_in_epilogue(QUANT)) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row_scale[h] = wrow[h] < 0 ? 0.f
                                 : static_cast<const float*>(args.b_scale)[expert * args.b_scale_expert_stride +
                                                                           (wrow[h] >> args.b_scale_row_shift) *
                                                                               args.b_scale_row_stride];
  }
  const float* bias = moe_tile::tile_bias<ROLE>(args, expert);
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int rl = f * 8 + 2 * t + j;
      const int slot = s_slot[rl];
      if (slot < 0) continue;
      const float w = moe_tile::router_weight(args, slot);
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
          else if constexpr (ROLE == kRoleGemm2Rows16)
            static_cast<unsigned short*>(args.c)[slot * args.ldc + col[h]] = sm80::from_float<DTYPE>(v[h]);
          else atomicAdd(c + (slot / args.top_k) * args.ldc + col[h], v[h]);
        }
      }
    }
}

}  // namespace swap_ab_detail
}  // namespace moejit
